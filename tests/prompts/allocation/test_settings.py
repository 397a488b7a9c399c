"""The `[experiments.allocation]` table: its schema's bounds and messages, and the checks against
the data (names available for the roster, pairs a roster allows, services that exist) that run
after it and report through the same one-line error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ibias.prompts.allocation.roster import max_roster_size
from ibias.prompts.allocation.settings import (
    MAX_EXPLICIT_PER_SERVICE,
    MAX_PAIRS_PER_SERVICE,
    MAX_ROSTER_SIZE,
    parse_settings,
)
from ibias.prompts.base import SettingsError

HERE = Path(".")


def _error(table: dict[str, Any], base: Path = HERE) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        parse_settings(table, base)
    assert "\n" not in str(info.value)
    return info.value


def test_defaults_are_the_papers_design() -> None:
    s = parse_settings({}, HERE)
    assert s.languages == ("en", "es") and len(s.services) == 8
    assert (s.roster_size, s.pairs_per_service, s.explicit_per_service) == (100, 100, 10)
    assert s.explanation == (False, True) and s.symptoms == ("none", "high", "low")
    assert s.same_age_band is True and all(isinstance(b, tuple) for b in s.age_bands)


@pytest.mark.parametrize(
    ("key", "ok", "bad", "message"),
    [
        ("roster_size", 4, 3, "expected an integer from 4 to 100,000, got 3"),
        ("roster_size", 100, MAX_ROSTER_SIZE + 1, "from 4 to 100,000, got 100001"),
        ("pairs_per_service", 0, -1, "expected an integer from 0 to 100,000, got -1"),
        ("pairs_per_service", MAX_PAIRS_PER_SERVICE, MAX_PAIRS_PER_SERVICE + 1, "got 100001"),
        ("explicit_per_service", MAX_EXPLICIT_PER_SERVICE, 10**23, "got 100000000000000000000000"),
        ("explicit_per_service", 0, 2.0, "expected an integer from 0 to 100,000, got 2.0"),
        ("same_age_band", False, 0, "expected true or false, got 0"),
    ],
)
def test_bounds(key: str, ok: Any, bad: Any, message: str) -> None:
    parse_settings({key: ok}, HERE)
    err = _error({key: bad})
    assert err.key == key and err.message.endswith(message)


def test_the_roster_is_bounded_by_the_names_available() -> None:
    most = max_roster_size()
    assert 4 < most < MAX_ROSTER_SIZE
    parse_settings({"roster_size": most}, HERE)
    err = _error({"roster_size": most + 1})
    assert err.key == "roster_size"
    assert err.message == (
        f"expected an integer from 4 to {most:,} (the names available), got {most + 1}"
    )


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        (
            {"explanation": [0, 1]},
            "explanation",
            "expected a non-empty list of distinct true/false",
        ),
        ({"explanation": [True, False, True]}, "explanation", "got [true, false, true]"),
        ({"explanation": [True, True]}, "explanation", "values must be distinct, got [true, true]"),
        ({"age_bands": [[18, 200]]}, "age_bands[0]", "pair of ages from 0 to 120, got [18, 200]"),
        ({"age_bands": [[40, 18]]}, "age_bands[0]", "after the band before, got [40, 18]"),
        ({"age_bands": [[18, "x"]]}, "age_bands[0]", "got [18, 'x']"),
        ({"pairing": {"gynecology": {"cis": "x"}}}, "pairing.gynecology", "got {cis = 'x'}"),
        ({"pairing": {"a b": {}}}, 'pairing."a b"', "unknown service"),
        ({"languages": ["en", "EN"]}, "languages[1]", "expected one of 'en', 'es', got 'EN'"),
        ({"symptoms": []}, "symptoms", "expected a non-empty list, got []"),
        ({"services": ["gynecology", 3]}, "services[1]", "expected a string, got 3"),
        ({"services": ["gynecology", "x"]}, "services[1]", "got 'x'"),
    ],
)
def test_messages(table: dict[str, Any], key: str, message: str) -> None:
    err = _error(table)
    assert err.key == key
    assert message in err.message


def test_services_file_with_an_integer_python_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text("x = " + "9" * 5000 + "\n")
    err = _error({"services_file": "s.toml"}, tmp_path)
    assert err.key == "services_file"

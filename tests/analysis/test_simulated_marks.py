"""What counts as simulated, and the words the report uses for it (analysis/simulated.py),
without a store: the rules over model ids, run configs and reported model names."""

from __future__ import annotations

import duckdb
from hypothesis import given
from hypothesis import strategies as st

from ibias.analysis.simulated import (
    REHEARSAL,
    REHEARSAL_MARK,
    SIMULATED_MARK,
    SIMULATOR_ENDPOINT,
    SIMULATOR_PROVIDER,
    mark_of,
    marked_title,
    reason_for,
    shown,
    simulated_from,
    simulated_headline,
    simulated_models,
)
from ibias.runner.simulator.drift import DRIFTED_VERSION_SUFFIX, first_version

CONFIG = """
[[models]]
id = "local"
provider = "simulator"

[[models]]
id = "hosted"
provider = "openai"
model = "gpt-4o-mini"
"""


def test_each_trace_marks_only_its_model() -> None:
    found = simulated_from(
        models=["local", "hosted", "pointed", "drifted"],
        configs=[CONFIG, "not toml = ["],
        reported=[
            ("hosted", "gpt-4o-mini-2024-07-18"),
            ("pointed", first_version("gpt-4o")),
            ("drifted", "gemini-2.0-flash" + DRIFTED_VERSION_SUFFIX),
            ("local", first_version("local")),
        ],
        rehearsal=False,
    )
    assert found == {
        "local": SIMULATOR_PROVIDER,
        "pointed": SIMULATOR_ENDPOINT,
        "drifted": SIMULATOR_ENDPOINT,
    }


def test_a_rehearsal_marks_every_model_whatever_its_config_and_replies_say() -> None:
    found = simulated_from(
        models=["local", "hosted"],
        configs=[CONFIG],
        reported=[("hosted", "gpt-4o-mini-2024-07-18"), ("late", None)],
        rehearsal=True,
    )
    assert found == {"local": REHEARSAL, "hosted": REHEARSAL, "late": REHEARSAL}
    assert {mark_of(m, found) for m in found} == {REHEARSAL_MARK}


@given(st.text(min_size=1, max_size=40))
def test_a_real_dated_snapshot_is_never_simulated(name: str) -> None:
    for real in (f"{name}-2024-07-18", f"{name}-20250219", f"{name}-001", name + "-sim"):
        found = simulated_from(models=["m"], configs=[], reported=[("m", real)], rehearsal=False)
        assert found == {}


def test_reported_model_labels_are_marked_by_their_id_or_their_name() -> None:
    simulated = {"local": SIMULATOR_PROVIDER}
    assert reason_for("local @ local-sim-2026-01", simulated) == SIMULATOR_PROVIDER
    assert reason_for("hosted @ gpt-4o-sim-2026-02", simulated) == SIMULATOR_ENDPOINT
    assert reason_for("hosted @ gpt-4o-2024-08-06", simulated) is None
    assert shown("local", simulated) == "local (simulated)"
    assert shown("hosted", simulated) == "hosted"


def test_titles_say_which_models_are_simulated() -> None:
    assert marked_title("Bias", ["a", "b"], {}) == "Bias"
    assert marked_title("Bias", ["a", "b"], dict.fromkeys("ab", SIMULATOR_PROVIDER)) == (
        f"Bias — {SIMULATED_MARK}"
    )
    assert marked_title("Bias", ["a", "b"], {"b": SIMULATOR_ENDPOINT}) == "Bias — simulated: b"
    assert marked_title("Bias", ["a"], {"a": REHEARSAL}) == f"Bias — {REHEARSAL_MARK}"


def test_headline_names_the_rehearsal_or_the_simulated_models() -> None:
    assert simulated_headline({}, ["a"]) is None
    rehearsal = simulated_headline({"a": REHEARSAL}, ["a"])
    assert rehearsal is not None and rehearsal.startswith("Rehearsal: simulated replies.")
    some = simulated_headline({"b": SIMULATOR_PROVIDER}, ["a", "b"])
    assert some is not None and some.startswith("Simulated: b was answered by ibias's simulator")
    every = simulated_headline(dict.fromkeys("ab", SIMULATOR_ENDPOINT), ["a", "b"])
    assert every is not None and every.startswith("Simulated: Every model was answered")


def test_a_store_from_before_the_marks_is_read_from_its_configs_and_replies() -> None:
    """A store without the `store_marks` table (before migration 015) is not a rehearsal."""
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE runs (config VARCHAR)")
        con.execute("CREATE TABLE trials (model_id VARCHAR)")
        con.execute("CREATE TABLE responses (model_id VARCHAR, provider_model VARCHAR)")
        con.execute("INSERT INTO runs VALUES (?)", [CONFIG])
        con.execute("INSERT INTO trials VALUES ('local'), ('hosted'), ('pointed')")
        con.execute(
            "INSERT INTO responses VALUES ('hosted', 'gpt-4o-mini-2024-07-18'), "
            "('pointed', 'claude-sonnet-4-5-sim-2026-01')"
        )
        assert simulated_models(con) == {
            "local": SIMULATOR_PROVIDER,
            "pointed": SIMULATOR_ENDPOINT,
        }
    finally:
        con.close()

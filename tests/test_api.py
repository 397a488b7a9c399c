"""The public Python API: exactly these names, importable, and cheap to import."""

from __future__ import annotations

import subprocess
import sys

import ibias

PUBLIC = [
    "AnalysisResult",
    "Column",
    "Config",
    "ConfigError",
    "ExperimentAnalysis",
    "ExperimentUnit",
    "ImportResult",
    "Item",
    "Parser",
    "Persona",
    "RunResult",
    "SectionContext",
    "StoreError",
    "TableContext",
    "TrialKind",
    "TrialSpec",
    "analyze",
    "arun",
    "connect",
    "import_replies",
    "load_config",
    "plan",
    "register",
    "run",
    "unregister",
]


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(ibias.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(ibias, name) is not None, name
    assert dir(ibias) == PUBLIC


def test_importing_ibias_loads_no_heavy_library() -> None:
    # The CLI's modules live under `ibias`, so its start-up pays for whatever `ibias` imports.
    code = (
        "import sys, ibias; heavy = {'polars', 'duckdb', 'matplotlib', 'aiohttp', 'scipy'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        _ = ibias.no_such_thing  # type: ignore[attr-defined]
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_api_installs_no_signal_handlers(tmp_path) -> None:
    # A notebook's own SIGINT handling must survive a run through the API.
    import signal

    from tests.helpers import write_prompts

    write_prompts(tmp_path / "prompts.jsonl", 3)
    (tmp_path / "c.toml").write_text(
        '[[models]]\nid = "m"\nprovider = "simulator"\n\n'
        '[experiments.prompts]\nfile = "prompts.jsonl"\n',
        encoding="utf-8",
    )
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    result = ibias.run(tmp_path / "c.toml", store=tmp_path / "s.duckdb")
    after = {s: signal.getsignal(s) for s in before}
    assert result.exit_code == 0
    assert after == before

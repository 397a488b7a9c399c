"""The public Python API: exactly these names, importable, and cheap to import."""

from __future__ import annotations

import subprocess
import sys

import anyio

import ibias

PUBLIC = [
    "AnalysisResult",
    "Answering",
    "AttemptError",
    "BatchAPI",
    "BatchSupport",
    "Capability",
    "Classification",
    "Column",
    "Config",
    "ConfigError",
    "CrossAnalysis",
    "CrossContext",
    "CrossEntry",
    "Error",
    "Experiment",
    "ExperimentAnalysis",
    "ExperimentUnit",
    "ExtraParsers",
    "FakeFailure",
    "FakeProvider",
    "ImportResult",
    "Item",
    "Limits",
    "LoadContext",
    "Message",
    "ModelConfig",
    "NoParams",
    "Overall",
    "Parser",
    "Persona",
    "PlanReport",
    "PlantedCheck",
    "PlantedContext",
    "PlantedCoverage",
    "PlantedResult",
    "PluginError",
    "Provider",
    "ProviderContext",
    "ProviderError",
    "ProviderTraits",
    "ReadsLogprobs",
    "RegistryError",
    "Reply",
    "Roster",
    "RunResult",
    "Sampling",
    "Section",
    "SectionContext",
    "SendingOptions",
    "SettingsError",
    "Simulation",
    "StimuliError",
    "Stop",
    "StoreError",
    "TableContext",
    "TrialKind",
    "TrialSpec",
    "UsageError",
    "Verdict",
    "analyze",
    "arun",
    "connect",
    "import_replies",
    "load_config",
    "plan",
    "provider",
    "register",
    "register_cross",
    "rng_for",
    "run",
    "sql",
    "unregister",
    "unregister_cross",
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


def test_api_runs_with_an_injected_provider_and_installs_no_signal_handlers(tmp_path) -> None:
    # A notebook's own SIGINT handling must hold while a run goes on through the API.
    import signal

    from tests.helpers import write_prompts

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before: dict[int, object] = {}
    during: list[dict[int, object]] = []

    class Recording(ibias.Provider):
        name = "recording"

        async def complete(self, messages, sampling):  # type: ignore[no-untyped-def]
            during.append({s: signal.getsignal(s) for s in watched})
            return ibias.Reply(
                content="ok",
                finish_reason="stop",
                refusal=None,
                prompt_tokens=3,
                completion_tokens=1,
                provider_model="recording-1",
                system_fingerprint=None,
                raw={},
            )

    write_prompts(tmp_path / "prompts.jsonl", 3)
    (tmp_path / "c.toml").write_text(
        '[[models]]\nid = "m"\nprovider = "simulator"\n\n'
        '[experiments.prompts]\nfile = "prompts.jsonl"\n',
        encoding="utf-8",
    )

    async def notebook_cell() -> ibias.RunResult:
        # The handlers of the loop the notebook already runs (asyncio's own SIGINT handler).
        before.update({s: signal.getsignal(s) for s in watched})
        return await ibias.arun(
            tmp_path / "c.toml",
            store=tmp_path / "s.duckdb",
            provider_factory=lambda model, key, context: Recording(),
        )

    result = anyio.run(notebook_cell)
    assert result.exit_code == 0, result.lines
    assert len(during) == 3
    assert all(seen == before for seen in during)
    with ibias.connect(tmp_path / "s.duckdb") as con:
        rows = con.sql("SELECT DISTINCT provider_model, content FROM responses").fetchall()
    assert rows == [("recording-1", "ok")]

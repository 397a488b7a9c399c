"""`ibias run CONFIG --rehearse` (issue 34): the shipped configs themselves, every model answered
by the in-process simulator on its own provider's protocol (OpenAI-compatible, Anthropic,
Gemini, and a batch API), with no API key in the environment and no network; its trial keys are
the real run's (planned from the real config); its store is its own and says so, and `run`
refuses a rehearsal into a real store and a real run into a rehearsal store.

The configs' grids are shrunk (fewer trials per cell, in a copy) so a test takes seconds; the
models, their base URLs, limits and options are the shipped ones."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import duckdb
import polars as pl
import pytest

from ibias.runner.cli import main
from ibias.runner.commands.status import rehearsal_line
from ibias.runner.config import load_config
from ibias.runner.execution.event_loop import event_loop_options, serves_simulator
from ibias.runner.execution.plan import build_experiments, trials_for
from ibias.runner.execution.rehearsal import DUMMY_KEY, Rehearsal, rehearsal_store, sim_table_note
from ibias.runner.execution.selection import select
from ibias.runner.simulator.answer import REFUSAL_TEXT
from ibias.store.marks import is_rehearsal

CONFIGS = Path(__file__).parents[3] / "configs"
RAW_BY_MODEL = "SELECT model_id, any_value(raw) FROM responses GROUP BY 1"


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key in the environment: a rehearsal must need none."""
    for name in list(os.environ):
        if name.endswith("_API_KEY"):
            monkeypatch.delenv(name)


def shrunk(text: str, **values: str) -> str:
    """`text` with each `key = ...` line of `values` set to the given value (all of them)."""
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert n, key
    return text


def paper_config(folder: Path, pack: Path) -> Path:
    """configs/paper.toml in `folder/configs/`: its stimuli at `pack`, 2 trials a cell."""
    text = (CONFIGS / "paper.toml").read_text("utf-8").replace('"../stimuli/paper"', f'"{pack}"')
    text = shrunk(text, trials_per_category="2", explicit_per_category="1", pairs_per_service="2")
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    path = folder / "configs" / "paper.toml"
    path.write_text(text, "utf-8")
    return path


def frontier_config(folder: Path) -> Path:
    text = shrunk(
        (CONFIGS / "frontier.toml").read_text("utf-8"),
        trials_per_category="2",
        explicit_per_category="1",
    )
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    path = folder / "configs" / "frontier.toml"
    path.write_text(text, "utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, text = cli(capsys, *argv)
    assert code == 2, text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def planned_keys(config: Path, models: list[str], experiments: list[str] | None) -> set[str]:
    """The trial keys of the REAL config's selection, as `plan` and `run` key them."""
    cfg = select(load_config(config), models, experiments)
    return {t.trial_key for t in trials_for(build_experiments(cfg), cfg.models)}


def stored(store: Path, sql: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_paper_rehearses_with_no_keys_into_its_own_store_with_the_real_keys(
    tmp_path, capsys, paper_pack_dir, monkeypatch
):
    cfg = paper_config(tmp_path, paper_pack_dir)
    models = ["gpt-4o-mini", "gemini-2.0-flash"]
    monkeypatch.chdir(tmp_path)
    selection = [a for m in models for a in ("--model", m)]
    code, text = cli(capsys, "run", str(cfg), "--rehearse", "--speed", "100", *selection)
    assert code == 0, text
    assert "rehearsal" in text and "in real time" in text
    store = tmp_path / "runs" / "paper.rehearsal.duckdb"
    assert not (tmp_path / "runs" / "paper.duckdb").exists()  # the real store is untouched
    keys = {k for (k,) in stored(store, "SELECT trial_key FROM trial_rows")}
    assert keys == planned_keys(cfg, models, None)
    answered = stored(store, "SELECT model_id, count(*) FROM responses GROUP BY 1 ORDER BY 1")
    assert [m for m, _ in answered] == sorted(models)
    assert sum(int(str(n)) for _, n in answered) == len(keys)
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert is_rehearsal(con)
    finally:
        con.close()
    assert DUMMY_KEY.encode() not in store.read_bytes()  # the dummy key is stored nowhere

    # `plan --rehearse` reads the rehearsal store: nothing left.
    code, text = cli(capsys, "plan", str(cfg), "--rehearse", "--json", *selection)
    assert code == 0 and '"remaining":0' in text.replace(" ", ""), text
    # A real run into the rehearsal store is refused (keys set: the store is what refuses).
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    line = refused(capsys, "run", str(cfg), "--store", str(store), *selection)
    assert "is a rehearsal store" in line and "--rehearse" in line
    assert stored(store, "SELECT count(*) FROM runs") == [(1,)]  # no run recorded

    # Its analysis calls both models simulated (a rehearsal's), never the paper's models.
    out = tmp_path / "report"
    code, text = cli(
        capsys, "analyze", "--config", str(cfg), "--rehearse", "--out", str(out),
        "--bootstrap", "50", "--no-population",
    )  # fmt: skip
    assert code == 0, text
    mark = "rehearsal: simulated replies"
    simulated = pl.read_csv(out / "models.csv").select("model_id", "simulated").rows()
    assert sorted(simulated) == [(m, mark) for m in sorted(models)]
    paper = pl.read_csv(out / "paper_models.csv")
    ran = paper.filter(pl.col("model_id").is_in(models))
    assert ran.height == 2 and set(ran["status"]) == {mark}, ran
    assert "paper's model" not in set(paper["status"].drop_nulls())
    html = (out / "report.html").read_text()
    start = re.search(r"id=['\"]findings['\"]", html)
    assert start is not None
    findings = html[start.start() : html.index("<nav>", start.start())]
    assert "Rehearsal: simulated replies" in html[: start.start()]  # the headline above it
    said = re.sub(r"<[^>]+>", "", findings)  # the findings' text, as a reader sees it
    assert all(f"{m} ({mark})" in said for m in models), said[:2000]


def test_a_rehearsal_into_a_store_a_real_run_wrote_is_refused(tmp_path, capsys, monkeypatch):
    real = tmp_path / "real.duckdb"
    sim = tmp_path / "sim.toml"
    sim.write_text(
        '[run]\nseed = 1\n[[models]]\nid = "s"\nprovider = "simulator"\nmodel = "sim-a"\n'
        '[experiments.word_association]\nlanguages = ["en"]\ncategories = ["emotions"]\n'
        "trials_per_category = 2\nexplicit_per_category = 0\n"
    )
    code, text = cli(capsys, "run", str(sim), "--store", str(real), "--quiet")
    assert code == 0, text
    cfg = frontier_config(tmp_path)
    line = refused(capsys, "run", str(cfg), "--rehearse", "--store", str(real))
    assert "not a rehearsal" in line and "frontier.rehearsal.duckdb" not in line
    assert stored(real, "SELECT count(*) FROM runs") == [(1,)]


def test_frontier_rehearses_native_anthropic_gemini_and_a_batch(tmp_path, capsys, monkeypatch):
    cfg = frontier_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    online = ["claude-haiku-4-5", "gemini-3-flash", "gpt-5.4-mini"]
    args = ["--experiment", "word_association", "--quiet", "--speed", "200"]
    code, text = cli(
        capsys, "run", str(cfg), "--rehearse", *(a for m in online for a in ("--model", m)), *args
    )
    assert code == 0, text
    # Gemini with thinking_budget = 0, as provider batches (Gemini's batch API).
    code, text = cli(
        capsys, "run", str(cfg), "--rehearse", "--model", "gemini-2.5-flash", "--batch", *args
    )
    assert code == 0, text
    assert "batches/" in text and "ingested" in text
    store = tmp_path / "runs" / "frontier.rehearsal.duckdb"
    keys = {k for (k,) in stored(store, "SELECT trial_key FROM trial_rows")}
    expected = planned_keys(cfg, online, ["word_association"]) | planned_keys(
        cfg, ["gemini-2.5-flash"], ["word_association"]
    )
    assert keys == expected
    rows = stored(
        store,
        "SELECT t.model_id, count(r.trial_key), count(*) FROM trial_rows t "
        "LEFT JOIN responses r USING (trial_key) GROUP BY 1 ORDER BY 1",
    )
    assert [r[0] for r in rows] == sorted([*online, "gemini-2.5-flash"])
    assert all(r[1] == r[2] for r in rows), rows  # every trial answered
    # Each model was answered on its own protocol: the reply as each API shapes it.
    raws = {m: json.loads(str(r)) for m, r in stored(store, RAW_BY_MODEL)}
    assert raws["claude-haiku-4-5"]["type"] == "message"  # Anthropic's Messages
    assert "candidates" in raws["gemini-3-flash"]  # Gemini's generateContent
    assert raws["gpt-5.4-mini"]["object"] == "chat.completion"  # OpenAI's chat completions


def test_a_sim_table_shapes_the_rehearsal_and_never_the_keys(tmp_path, capsys, monkeypatch):
    plain = frontier_config(tmp_path / "plain")
    with_sim = plain.read_text()
    # A [models.sim] table on a native Anthropic model: refuse everything in the rehearsal.
    block_end = "price_output = 5.0\n"
    assert with_sim.count(block_end) == 1
    with_sim = with_sim.replace(block_end, block_end + "\n[models.sim]\nrefusal_rate = 1.0\n")
    (tmp_path / "sim" / "configs").mkdir(parents=True)
    simmed = tmp_path / "sim" / "configs" / "frontier.toml"
    simmed.write_text(with_sim)
    selection = (["claude-haiku-4-5"], ["word_association"])
    assert planned_keys(simmed, *selection) == planned_keys(plain, *selection)
    assert sim_table_note(load_config(simmed)) == (
        "[models.sim] of claude-haiku-4-5: used only by rehearsals (--rehearse); "
        "ignored by this run"
    )
    assert sim_table_note(load_config(plain)) is None
    monkeypatch.chdir(tmp_path)
    code, out = cli(
        capsys, "run", str(simmed), "--rehearse", "--model", "claude-haiku-4-5",
        "--experiment", "word_association", "--speed", "500", "--quiet",
    )  # fmt: skip
    assert code == 0, out
    store = tmp_path / "sim" / "runs" / "frontier.rehearsal.duckdb"
    replies = {c for (c,) in stored(store, "SELECT DISTINCT coalesce(content, '') FROM responses")}
    assert replies and replies <= {REFUSAL_TEXT, ""}  # the simulator refused every prompt


def test_speed_compresses_limits_and_latencies():
    cfg = load_config(CONFIGS / "frontier.toml")
    fast = Rehearsal(speed=100)
    profile = fast.profile(cfg)
    haiku = profile.for_model("claude-haiku-4-5-20251001")
    slow = Rehearsal().profile(cfg).for_model("claude-haiku-4-5-20251001")
    assert haiku.latency_ms == pytest.approx(slow.latency_ms / 100)
    assert slow.rpm is not None and haiku.rpm == slow.rpm * 100  # no config limit: the default
    controlled = load_config(CONFIGS / "controlled.toml")
    sped = fast.config(controlled)
    assert [m.rpm for m in sped.models] == [
        None if m.rpm is None else m.rpm * 100 for m in controlled.models
    ]
    assert [m.params() for m in sped.models] == [m.params() for m in controlled.models]
    assert all(v is None or v == DUMMY_KEY for v in fast.keys(cfg).values())


def test_a_rehearsal_runs_on_asyncio_loop():
    from dataclasses import replace

    cfg = load_config(CONFIGS / "frontier.toml")
    assert not serves_simulator(cfg)
    assert serves_simulator(replace(cfg, rehearsal=True))
    assert event_loop_options(replace(cfg, rehearsal=True)) == {}


def test_rehearsal_store_names_and_flags(tmp_path, capsys):
    assert rehearsal_store(Path("runs/paper.duckdb")) == Path("runs/paper.rehearsal.duckdb")
    assert rehearsal_store(Path("x/store.db")) == Path("x/store.db.rehearsal.duckdb")
    cfg = frontier_config(tmp_path)
    line = refused(capsys, "status", str(cfg), "--rehearse")
    assert str(tmp_path / "runs" / "frontier.rehearsal.duckdb") in line
    line = refused(capsys, "run", str(cfg), "--speed", "10")
    assert "--speed applies only with --rehearse" in line
    line = refused(capsys, "run", str(cfg), "--rehearse", "--batch", "--no-wait")
    assert "--no-wait" in line


def test_status_gives_the_real_time_eta_of_a_sped_up_rehearsal():
    report = {
        "running": True,
        "rehearsal": {"speed": 100},
        "models": [{"model_id": "a", "eta_s": 90.0}, {"model_id": "b", "eta_s": None}],
    }
    assert rehearsal_line(report) == (
        "rehearsal at --speed 100: the ETAs above are compressed; in real time: a 2h30m"
    )
    assert rehearsal_line({"running": True, "models": []}) is None


def test_the_python_api_rehearses_and_reads_the_rehearsal_store(tmp_path):
    import ibias

    cfg = frontier_config(tmp_path)
    real = tmp_path / "runs" / "frontier.duckdb"
    report = ibias.plan(cfg, models=["gemini-3-flash"], rehearse=True)
    assert report.to_dict()["store"].endswith("frontier.rehearsal.duckdb")
    result = ibias.run(
        cfg,
        models=["gemini-3-flash"],
        experiments=["word_association"],
        rehearse=True,
        speed=500,
    )
    assert result.exit_code == 0, result.lines
    frame = ibias.sql(real, "SELECT count(*) AS n FROM responses", rehearse=True)
    assert frame["n"][0] == len(planned_keys(cfg, ["gemini-3-flash"], ["word_association"]))
    assert not real.exists()
    with pytest.raises(ibias.UsageError):
        ibias.run(cfg, models=["gemini-3-flash"], speed=10)

"""The everyday commands (issue 13): --config on every store command, `show`, the `replies`
view, `run`/`plan` for part of a config, plan's tokens, cost and least time, --help and
--version. Each on a fresh store (none yet) and on a finished one; all in-process on the
built-in simulator."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import duckdb
import pytest

from ibias.runner.cli import build_parser, main
from ibias.runner.commands.stores import store_of
from tests.helpers import model_block, write_config


def sim_config(tmp_path: Path, *models: str, n: int = 6, extra_keys: str = "") -> Path:
    blocks = [model_block(m, provider="simulator", max_tokens=16) for m in models]
    return write_config(tmp_path, blocks, n_prompts=n, extra=extra_keys)


def run_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def fail(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ --help and --version


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _subparsers(sub)
    return out


def test_every_option_of_every_command_has_help_with_its_default():
    missing = []
    for prog, parser in _subparsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            text = action.help or ""
            if not text.strip():
                missing.append(f"{prog} {action.dest}: no help")
                continue
            optional = bool(action.option_strings) and not action.required
            if optional and not isinstance(action, argparse._VersionAction):
                if "default" not in text:
                    missing.append(f"{prog} {action.option_strings[0]}: help names no default")
                elif action.default not in (None, False) and str(action.default) not in text:
                    missing.append(f"{prog} {action.option_strings[0]}: default not shown")
    assert missing == []


def test_help_of_every_command_names_every_option(capsys):
    for prog, parser in _subparsers(build_parser()):
        argv = [*prog.split()[1:], "--help"]
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 0
        text = capsys.readouterr().out
        for action in parser._actions:
            for option in action.option_strings:
                assert option in text, (prog, option)


def test_version_comes_from_the_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"ibias {version('ibias')}"


# ------------------------------------------------------------------ --config finds the store


def test_config_names_the_store_for_every_store_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default store must not be what is found
    cfg = sim_config(tmp_path, "a")
    store = tmp_path / "store.duckdb"
    # Fresh: no store yet, and the commands that read one say which store they looked for.
    for argv in (
        ["status", str(cfg)],
        ["status", "--config", str(cfg)],
        ["sql", "SELECT 1", "--config", str(cfg)],
        ["show", "--config", str(cfg)],
    ):
        assert str(store) in fail(capsys, *argv)
    run_ok(capsys, "run", str(cfg), "--quiet")
    # Finished: each command reads the config's store.
    assert json.loads(run_ok(capsys, "status", str(cfg), "--json"))["done"] == 6
    assert json.loads(run_ok(capsys, "status", "--config", str(cfg), "--json"))["done"] == 6
    out = run_ok(capsys, "sql", "SELECT count(*) AS n FROM responses", "--config", str(cfg))
    assert "6" in out
    assert run_ok(capsys, "show", "--config", str(cfg)).startswith("trial ")
    for command in (["analyze"], ["import", "x.jsonl"]):
        args = build_parser().parse_args([*command, "--config", str(cfg)])
        assert store_of(args) == store
    assert not (tmp_path / "runs").exists()


def test_store_and_config_that_disagree_are_refused(tmp_path, capsys):
    cfg = sim_config(tmp_path, "a")
    run_ok(capsys, "run", str(cfg), "--quiet")
    line = fail(capsys, "status", "--config", str(cfg), "--store", str(tmp_path / "other.duckdb"))
    assert "--store" in line and "store.duckdb" in line and "give one" in line
    # Agreeing is fine; so is --store with a config that names no store.
    same = ["--config", str(cfg), "--store", str(tmp_path / "store.duckdb"), "--json"]
    assert json.loads(run_ok(capsys, "status", *same))["done"] == 6
    bare = tmp_path / "bare.toml"
    bare.write_text("[run]\nseed = 1\n")
    mine = ["--config", str(bare), "--store", str(tmp_path / "store.duckdb"), "--json"]
    assert json.loads(run_ok(capsys, "status", *mine))["done"] == 6
    # Two configs (argument and option) must be the same file.
    assert "differ" in fail(capsys, "status", str(cfg), "--config", str(bare))
    broken = cfg.with_name("broken.toml")
    broken.write_text("[run\n")
    assert "not valid TOML" in fail(capsys, "status", "--config", str(broken))
    assert "config file not found" in fail(capsys, "sql", "SELECT 1", "--config", "nope.toml")


# ------------------------------------------------------------------ run and plan, in part


def test_run_and_plan_take_model_and_experiment_filters(tmp_path, capsys):
    cfg = sim_config(tmp_path, "a", "b", "c", n=5)
    store = tmp_path / "store.duckdb"
    plan = json.loads(run_ok(capsys, "plan", str(cfg), "--model", "b", "--json"))
    assert plan["total"] == 5 and {c["model_id"] for c in plan["by"]} == {"b"}
    run_ok(capsys, "run", str(cfg), "--model", "b", "--model", "c", "--quiet")
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute("SELECT model_id, count(*) FROM responses GROUP BY 1 ORDER BY 1")
        assert rows.fetchall() == [("b", 5), ("c", 5)]
    finally:
        con.close()
    # The whole config afterwards: only `a` is left, and the keys of b and c are unchanged.
    whole = json.loads(run_ok(capsys, "plan", str(cfg), "--json"))
    assert (whole["total"], whole["done"]) == (15, 10)
    assert {m["model_id"]: m["remaining"] for m in whole["models"]} == {"a": 5, "b": 0, "c": 0}
    run_ok(capsys, "run", str(cfg), "--quiet")
    assert json.loads(run_ok(capsys, "status", str(cfg), "--json"))["done"] == 15
    # Same keys: the full run planned no new trial for b and c and asked only a's.
    assert query(store, "SELECT count(DISTINCT trial_key), count(*) FROM trials") == [(15, 15)]
    assert query(store, "SELECT count(*) FROM responses") == [(15,)]
    assert query(store, "SELECT count(DISTINCT plan_hash) FROM plans") == [(2,)]  # b+c; all
    assert "no models 'x', 'y'" in fail(capsys, "run", str(cfg), "--model", "x", "--model", "y")
    line = fail(capsys, "plan", str(cfg), "--experiment", "allocation")
    assert "no experiment 'allocation'" in line and "it has prompts" in line


def test_missing_keys_are_named_all_at_once_and_only_for_selected_models(tmp_path, capsys):
    blocks = [
        model_block(
            name,
            provider="openai",
            base_url="http://127.0.0.1:9/v1",
            api_key_env=f"IBIAS_UNSET_{name.upper()}",
        )
        for name in ("a", "b", "c")
    ]
    cfg = write_config(tmp_path, blocks, n_prompts=2)
    line = fail(capsys, "run", str(cfg))
    assert "3 environment variables are not set" in line
    assert all(f"IBIAS_UNSET_{n}" in line for n in "ABC")
    line = fail(capsys, "run", str(cfg), "--model", "b")
    assert "IBIAS_UNSET_B is not set" in line and "IBIAS_UNSET_A" not in line


# ------------------------------------------------------------------ plan: tokens, cost, time


def test_plan_gives_tokens_cost_and_least_time_per_model(tmp_path, capsys):
    n = 20_000
    blocks = [
        model_block("slow", provider="simulator", rpm=30, max_tokens=10, price_input=1.0),
        model_block("tokens", provider="simulator", tpm=60_000, max_tokens=10, price_output=2.0),
        model_block("free", provider="simulator", max_tokens=10),
    ]
    cfg = write_config(tmp_path, blocks, n_prompts=n, store=None)
    report = json.loads(run_ok(capsys, "plan", str(cfg), "--json"))
    # Independently: every prompt is "Say something about item p{i}." (tests/helpers.py).
    prompt_tokens = sum(
        math.ceil((len(f"Say something about item p{i}.") + 8) / 4) for i in range(n)
    )
    models = {m["model_id"]: m for m in report["models"]}
    for m in models.values():
        assert m["remaining"] == n
        assert m["estimated_tokens"] == prompt_tokens + 10 * n
    assert models["slow"]["estimated_cost_usd"] == round(prompt_tokens / 1e6, 4)
    assert models["tokens"]["estimated_cost_usd"] == round(2.0 * 10 * n / 1e6, 4)
    # 30 rpm: one request every 2 s after the first.
    assert models["slow"]["min_seconds"] == (n - 1) * 2.0
    assert models["slow"]["limited_by"] == "rpm"
    assert models["tokens"]["min_seconds"] == round((prompt_tokens + n) * 60 / 60_000 - 1, 1)
    assert models["free"]["min_seconds"] is None and models["free"]["limited_by"] is None
    assert models["free"]["min_seconds_per_latency_s"] == n / 16
    assert report["min_seconds"] == (n - 1) * 2.0 and report["slowest_model"] == "slow"
    assert report["time_unknown_models"] == ["free"]
    text = " ".join(run_ok(capsys, "plan", str(cfg)).split())
    assert "11 h 06 min (30 rpm)" in text
    assert "time: at least 11 h 06 min, set by slow" in text
    assert "unknown for free (no rpm or tpm configured)" in text


def test_plan_from_a_finished_store_reads_the_same_numbers(tmp_path, capsys):
    cfg = sim_config(tmp_path, "a", "b", n=8)
    fresh = json.loads(run_ok(capsys, "plan", str(cfg), "--json"))
    run_ok(capsys, "run", str(cfg), "--model", "a", "--quiet")
    partial = json.loads(run_ok(capsys, "plan", str(cfg), "--json"))
    run_ok(capsys, "run", str(cfg), "--quiet")
    done = json.loads(run_ok(capsys, "plan", str(cfg), "--json"))  # read from the stored plan
    by_model = {m["model_id"]: m for m in fresh["models"]}
    assert {m["model_id"]: m for m in partial["models"]}["b"] == by_model["b"]
    assert {m["model_id"]: m for m in partial["models"]}["a"]["remaining"] == 0
    assert all(m["remaining"] == 0 and m["estimated_tokens"] == 0 for m in done["models"])
    assert done["by"] == [{**c, "done": c["trials"]} for c in fresh["by"]]
    assert done["min_seconds"] is None and done["time_unknown_models"] == []
    assert "time: nothing left to request" in run_ok(capsys, "plan", str(cfg))
    # Read from the stored plan with trials left (as after an interrupted run), the numbers
    # are those of the trials without a response, counted here from their messages.
    store = tmp_path / "store.duckdb"
    con = duckdb.connect(str(store))
    try:
        con.execute("DELETE FROM responses WHERE hash(trial_key) % 3 = 0")
    finally:
        con.close()
    missing = query(
        store,
        "SELECT t.model_id, t.messages FROM trials t WHERE t.trial_key NOT IN "
        "(SELECT trial_key FROM responses)",
    )
    assert missing
    left = json.loads(run_ok(capsys, "plan", str(cfg), "--json"))
    for m in left["models"]:
        mine = [json.loads(msgs) for model_id, msgs in missing if model_id == m["model_id"]]
        prompt = sum(math.ceil(sum(len(x["content"]) + 8 for x in msgs) / 4) for msgs in mine)
        assert m["remaining"] == len(mine)
        assert m["estimated_tokens"] == prompt + 16 * len(mine)
    assert left["remaining"] == len(missing)


# ------------------------------------------------------------------ show and replies


@pytest.fixture()
def finished(tmp_path, capsys) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[run]\nseed = 3\nstore = "{tmp_path / "s.duckdb"}"\n'
        + model_block("sim-a", provider="simulator", max_tokens=64)
        + model_block("sim-b", provider="simulator", max_tokens=64)
        + "[experiments.word_association]\n"
    )
    run_ok(capsys, "run", str(cfg), "--quiet")
    return tmp_path / "s.duckdb"


def query(store: Path, sql: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_replies_view_joins_trial_prompt_reply_and_parse(finished):
    rows = query(
        finished,
        "SELECT v.trial_key, v.experiment, v.design, v.prompt, v.reply, v.parsed, "
        "t.messages, r.content FROM replies v JOIN trials t USING (trial_key) "
        "JOIN responses r USING (trial_key)",
    )
    assert len(rows) == query(finished, "SELECT count(*) FROM responses")[0][0] > 0
    for _key, experiment, design, prompt, reply, _parsed, messages, content in rows:
        assert prompt == json.loads(messages)[-1]["content"] and reply == content
        assert design == ("controlled" if experiment == "word_association" else None)
    # The parse is the newest row of the kind's own table, column for column.
    bias = dict(query(finished, "SELECT trial_key, bias FROM word_association_trials"))
    parsed = {
        k: json.loads(p)
        for k, e, _, _, _, p, _, _ in rows
        if e == "word_association" and p is not None
    }
    assert parsed.keys() == bias.keys()
    assert all(parsed[k]["bias"] == pytest.approx(bias[k]) for k in bias)
    answers = dict(query(finished, "SELECT trial_key, answer FROM explicit_answers"))
    for k, e, *_rest in rows:
        if e == "word_association_explicit":
            assert json.loads(_rest[3])["answer"] == answers[k]


def test_show_one_trial_by_key_prefix_and_by_filters(finished, capsys):
    key, content, model = query(
        finished,
        "SELECT r.trial_key, r.content, r.model_id FROM responses r JOIN trials t "
        "USING (trial_key) WHERE t.experiment = 'word_association' LIMIT 1",
    )[0]
    text = run_ok(capsys, "show", str(key)[:12], "--store", str(finished))
    assert text.startswith(f"trial {key}\n")
    assert f"model {model}" in text and "(controlled design)" in text
    messages = json.loads(
        query(finished, f"SELECT messages FROM trials WHERE trial_key = '{key}'")[0][0]
    )
    for line in str(messages[-1]["content"]).splitlines():
        assert f"    {line}".rstrip() in text
    for line in str(content).splitlines():
        assert f"    {line}".rstrip() in text
    assert "attempts (1):" in text and "parsed (parser version" in text
    # JSON: the same trial, everything the store holds.
    [obj] = json.loads(run_ok(capsys, "show", str(key), "--store", str(finished), "--json"))
    assert obj["trial_key"] == key and obj["reply"]["content"] == content
    assert obj["messages"] == messages and obj["parsed"]["bias"] is not None
    assert [a["outcome"] for a in obj["attempts"]] == ["ok"]
    # Filters: model and experiment, and a condition on the replies view.
    [first] = json.loads(
        run_ok(
            capsys,
            "show",
            "--store",
            str(finished),
            "--model",
            "sim-b",
            "--experiment",
            "word_association_explicit",
            "--json",
        )
    )
    assert first["model_id"] == "sim-b" and first["experiment"] == "word_association_explicit"
    picked = json.loads(
        run_ok(
            capsys,
            "show",
            "--store",
            str(finished),
            "--where",
            "parsed ->> 'bias' IS NOT NULL AND model_id = 'sim-a'",
            "--random",
            "3",
            "--json",
        )
    )
    assert len(picked) == 3 and len({t["trial_key"] for t in picked}) == 3
    assert all(t["model_id"] == "sim-a" and t["parsed"]["bias"] is not None for t in picked)


def test_show_refuses_what_names_no_single_trial(finished, capsys):
    store = ["--store", str(finished)]
    assert "no trial with a key starting 'fffff" in fail(capsys, "show", "fffffffff", *store)
    assert "not a trial key" in fail(capsys, "show", "xyz", *store)
    assert "not a trial key" in fail(capsys, "show", "", *store)
    assert "several trials" in fail(capsys, "show", "a", *store)
    assert "no trial matches --model 'nope'" in fail(capsys, "show", "--model", "nope", *store)
    assert "--where failed" in fail(capsys, "show", "--where", "no_such_column = 1", *store)
    # --where is the user's SQL: it stays one read inside the sandbox.
    where = "true)); DROP TABLE trials; SELECT 1 WHERE ((true"
    assert "has 3 statements" in fail(capsys, "show", "--where", where, *store)
    line = fail(
        capsys, "show", "--where", "trial_key IN (SELECT * FROM read_text('/etc/hostname'))", *store
    )
    assert "failed" in line or "refused" in line
    assert query(finished, "SELECT count(*) FROM trials")[0][0] > 0
    assert "TRIAL_KEY or" in fail(capsys, "show", "abc", "--model", "sim-a", *store)


# ------------------------------------------------------------------ status at 80 columns


GEMINIS = ("gemini-2.0-flash", "gemini-2.0-flash-lite", "openrouter/meta-llama/llama-3.3-70b")


def _status_text(report: dict[str, object]) -> str:
    import io

    from rich.console import Console

    from ibias.runner.status_report import render_status

    buffer = io.StringIO()
    render_status(report, Console(file=buffer, width=80))
    return buffer.getvalue()


def _check_80_columns(text: str) -> list[str]:
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert "…" not in text  # nothing elided
    return lines


def test_status_fits_80_columns_and_has_one_shape_during_and_after_a_run(tmp_path, capsys):
    from ibias.runner.status import ModelStats, snapshot
    from ibias.runner.status_report import COLUMNS, rows, status_report

    blocks = [model_block(m, provider="simulator", price_output=1.0) for m in GEMINIS]
    cfg = write_config(tmp_path, blocks, n_prompts=30)
    store = tmp_path / "store.duckdb"
    # During a run: what the status file holds (the run writes `snapshot` every second).
    live = [
        ModelStats(model_id=m, total=123_456, done=98_765, failed=12, retries=3456) for m in GEMINIS
    ]
    during = {
        "store": str(store),
        "running": True,
        "holder": "pid 1 on host",
        **snapshot("r", "running", __import__("datetime").datetime.now(), live),
    }
    text = _status_text(during)
    lines = _check_80_columns(text)
    header = next(line for line in lines if line.startswith("model"))
    # A 35-character id leaves no room for every column at 80: the droppable ones go, the
    # ones a sweep is watched for stay, and nothing wraps.
    assert header.split() == ["model", "done/total", "failed", "req/s", "cost", "$", "ETA"]
    assert [r[0] for r in rows(during)] == list(GEMINIS)  # ids whole, in the run's order
    assert "98,765/123,456" in text
    # After the run: the same columns, from the store.
    run_ok(capsys, "run", str(cfg), "--quiet")
    after = status_report(store)
    after_text = _status_text(after)
    after_lines = _check_80_columns(after_text)
    after_header = next(line for line in after_lines if line.startswith("model"))
    assert after_header.split() == header.split()
    assert [r[0] for r in rows(after)] == sorted(GEMINIS)
    got = {m["model_id"]: m for m in after["models"]}
    cost = dict(query(store, "SELECT model_id, sum(cost_usd) FROM responses GROUP BY 1"))
    for m in GEMINIS:
        assert (got[m]["done"], got[m]["total"], got[m]["failed"]) == (30, 30, 0)
        assert got[m]["cost_usd"] == round(cost[m], 6)
    assert set(header.split()) - {"cost", "$"} <= set(COLUMNS)
    # Every id whole on its own row: none cut, none wrapped onto a line of its own.
    end = next(i for i, line in enumerate(after_lines) if line.startswith("planned "))
    body = after_lines[after_lines.index(after_header) + 2 : end]
    assert [line.split()[0] for line in body] == sorted(GEMINIS)

"""`ibias import --stimuli DIR`: each imported paper-design reply's messages are compared with
the paper design's prompt rendered from the pack, and the result is stored per reply."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from ibias.prompts.stimuli import load_pack
from ibias.runner.config import load_config
from ibias.runner.execution.plan import Trial, build_experiments, trials_for
from ibias.store import db
from ibias.store.importer import import_file, parse_line
from tests.helpers import IBIAS, model_block, write_config

FORMAT_LINE = "Return only the name of the selected person in the following XML format:"


def paper_trials(folder: Path, pack: Path) -> list[Trial]:
    extra = f"""
[experiments.word_association]
design = "paper"
stimuli = "{pack}"
languages = ["en", "es"]
categories = ["emotions"]
trials_per_category = 3
explicit_per_category = 0

[experiments.allocation]
design = "paper"
stimuli = "{pack}"
languages = ["en", "es"]
services = ["hiv", "prostate_study"]
pairs_per_service = 2
"""
    folder.mkdir(parents=True, exist_ok=True)
    blocks = [model_block("m", provider="simulator")]
    cfg = load_config(write_config(folder, blocks, n_prompts=1, seed=5, extra=extra))
    return [t for t in trials_for(build_experiments(cfg), cfg.models) if t.experiment != "prompts"]


def line(t: Trial, **changes: Any) -> dict[str, Any]:
    out = {
        "experiment": t.experiment,
        "model_id": "imported-model",
        "language": t.language,
        "item": dict(t.item),
        "messages": [dict(m) for m in t.messages],
        "content": "<person>nobody</person>",
    }
    out.update(changes)
    return out


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def run_import(tmp_path: Path, rows: list[dict[str, Any]], pack: Path | None) -> dict[str, tuple]:
    """Import `rows`; the check (status, difference, template) of every stored reply, by the
    row's `id` for this file's rows (by trial key for replies stored before)."""
    path = tmp_path / "replies.jsonl"
    raw = [json.dumps(r, ensure_ascii=False).encode() for r in rows]
    path.write_bytes(b"".join(r + b"\n" for r in raw))
    key_to_id = {parse_line(r).trial.trial_key: row["id"] for r, row in zip(raw, rows, strict=True)}
    con = db.open_store(tmp_path / "s.duckdb", create=True)
    try:
        import_file(con, path, load_pack(pack) if pack is not None else None)
        stored = con.execute(
            "SELECT r.trial_key, c.status, c.difference, c.template "
            "FROM responses r LEFT JOIN prompt_checks c USING (trial_key)"
        ).fetchall()
    finally:
        con.close()
    return {key_to_id.get(key, key): tuple(rest) for key, *rest in stored}


def test_replies_are_classified(tmp_path: Path, paper_pack_dir: Path) -> None:
    trials = paper_trials(tmp_path / "plan", paper_pack_dir)
    alloc = [t for t in trials if t.experiment == "allocation" and t.language == "en"]
    wa = [t for t in trials if t.experiment == "word_association"]
    text = alloc[0].messages[0]["content"]
    assert FORMAT_LINE in text
    rows = [line(t, id=f"same-{i}") for i, t in enumerate(trials)]  # every planned prompt
    rows += [
        line(alloc[0], id="repeated", messages=user(text.replace(FORMAT_LINE, FORMAT_LINE * 2))),
        line(
            alloc[0],
            id="spaced",
            messages=user(text.replace("\n" + FORMAT_LINE, " " + FORMAT_LINE)),
        ),
        line(alloc[0], id="no-messages", messages=[]),
        line(alloc[0], id="reworded", messages=user(text.replace("HIV treatment", "HIV testing"))),
        line(alloc[0], id="system", messages=[{"role": "system", "content": "x"}, *user(text)]),
    ]
    template_less = {k: v for k, v in wa[0].item.items() if k != "template"}
    rows.append(line(wa[0], id="no-template", item=template_less))
    found = run_import(tmp_path, rows, paper_pack_dir)
    assert len(found) == len(rows)
    assert all(found[f"same-{i}"][0] == "identical" for i in range(len(trials)))
    assert found["repeated"] == ("differs", "block_repeated", None)
    assert found["spaced"] == ("differs", "whitespace", None)
    assert found["no-messages"] == ("absent", None, None)
    assert found["reworded"] == ("differs", "other_wording", None)
    assert found["system"] == ("differs", "messages", None)
    assert found["no-template"] == ("identical", None, wa[0].item["template"])


def test_without_a_pack_nothing_is_checked(tmp_path: Path, paper_pack_dir: Path) -> None:
    trials = paper_trials(tmp_path / "plan", paper_pack_dir)
    found = run_import(tmp_path, [line(t, id=str(i)) for i, t in enumerate(trials)], None)
    assert set(found.values()) == {(None, None, None)}


def test_the_import_command_prints_the_counts(tmp_path: Path, paper_pack_dir: Path) -> None:
    trials = paper_trials(tmp_path / "plan", paper_pack_dir)
    rows = [line(t, id=str(i)) for i, t in enumerate(trials)] + [
        line(trials[0], id="x", messages=[])
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    store = tmp_path / "cli.duckdb"
    done = subprocess.run(
        [*IBIAS, "import", str(path), "--store", str(store), "--stimuli", str(paper_pack_dir)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"paper-design prompts checked against {paper_pack_dir}: absent 1, identical {len(trials)}"
    )
    bad = subprocess.run(
        [*IBIAS, "import", str(path), "--store", str(store), "--stimuli", str(tmp_path / "no")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1


def test_a_store_from_before_prompt_checks_upgrades(tmp_path: Path, paper_pack_dir: Path) -> None:
    """A store made before prompt checks (schema 9, no prompt_checks: this code's store with
    migration 010 taken back out) gains the table on open, every row unchanged, and then
    takes checked imports."""
    trials = paper_trials(tmp_path / "plan", paper_pack_dir)
    first = run_import(tmp_path, [line(t, id=f"a{i}") for i, t in enumerate(trials)], None)
    con = db.open_store(tmp_path / "s.duckdb")
    try:
        con.execute("DROP TABLE prompt_checks")
        con.execute("DROP VIEW batch_state")  # and the later migrations' (012)
        con.execute("DROP TABLE batches")
        con.execute("DELETE FROM schema_version WHERE version > 9")
        assert db.schema_version(con) == 9
        before = con.execute("SELECT * FROM trials ORDER BY trial_key").fetchall()
    finally:
        con.close()
    con = db.open_store(tmp_path / "s.duckdb")
    try:
        assert db.schema_version(con) == db.SCHEMA_VERSION >= 10
        assert con.execute("SELECT * FROM trials ORDER BY trial_key").fetchall() == before
        assert con.execute("SELECT count(*) FROM prompt_checks").fetchone() == (0,)
    finally:
        con.close()
    second = run_import(
        tmp_path, [line(t, id=f"new-{i}") for i, t in enumerate(trials)], paper_pack_dir
    )
    assert set(first.values()) == {(None, None, None)}
    old = [v for k, v in second.items() if not str(k).startswith("new-")]
    assert old == [(None, None, None)] * len(trials)  # imported before: not checked
    new = {v for k, v in second.items() if str(k).startswith("new-")}
    assert {status for status, _, _ in new} == {"identical"}

"""The report's differences section tabulates, per model, what `ibias import --stimuli` found
about the imported replies' prompts, and says when they were not checked."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import ibias
from tests.analysis.test_paper_stats import section
from tests.store.test_import_prompt_checks import FORMAT_LINE, line, paper_trials, run_import, user


def test_the_report_counts_checked_prompts_per_model(tmp_path: Path, paper_pack_dir: Path) -> None:
    trials = [t for t in paper_trials(tmp_path / "plan", paper_pack_dir) if t.language == "en"]
    text = trials[-1].messages[0]["content"]
    assert FORMAT_LINE in text  # the last trial planned is an allocation one
    rows = [line(t, id=f"same-{i}") for i, t in enumerate(trials)]
    rows += [
        line(trials[-1], id="twice", messages=user(text.replace(FORMAT_LINE, FORMAT_LINE * 2))),
        line(trials[-1], id="bare", messages=[]),
    ]
    run_import(tmp_path, rows, paper_pack_dir)
    result = ibias.analyze(tmp_path / "s.duckdb", tmp_path / "out", bootstrap=50)
    checks = pl.read_csv(tmp_path / "out" / "paper_prompt_checks.csv")
    by_kind = {r["experiment"]: r for r in checks.iter_rows(named=True)}
    n_alloc = sum(t.experiment == "allocation" for t in trials)
    n_wa = sum(t.experiment == "word_association" for t in trials)
    assert by_kind["allocation"]["identical"] == n_alloc
    assert by_kind["allocation"]["differs_block_repeated"] == 1
    assert by_kind["allocation"]["absent"] == 1
    assert by_kind["allocation"]["replies"] == n_alloc + 2
    assert by_kind["word_association"]["identical"] == by_kind["word_association"]["replies"]
    assert by_kind["word_association"]["replies"] == n_wa
    html = section(result)
    assert "Imported prompts against the paper" in html and "block repeated" in html
    assert "one prompt in five" not in result.report.read_text("utf-8")


def test_the_report_says_when_prompts_were_not_checked(
    tmp_path: Path, paper_pack_dir: Path
) -> None:
    trials = paper_trials(tmp_path / "plan", paper_pack_dir)
    run_import(tmp_path, [line(t, id=str(i)) for i, t in enumerate(trials)], None)
    result = ibias.analyze(tmp_path / "s.duckdb", tmp_path / "out", bootstrap=50)
    assert "prompts were not checked against the paper" in section(result)

"""One store holding both designs keeps them apart in every view, table, figure and section."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import ibias


def _config(folder: Path, name: str, design_keys: str, wa: str, allocation: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        f'[run]\nseed = 3\nstore = "both.duckdb"\n\n'
        '[[models]]\nid = "sim-a"\nprovider = "simulator"\n'
        "[models.sim]\nword_bias = 0.7\nallocation_cis_default = 0.8\n\n"
        f"[experiments.word_association]\n{design_keys}{wa}\n\n"
        f"[experiments.allocation]\n{design_keys}{allocation}\n",
        encoding="utf-8",
    )
    return path


def test_both_designs_in_one_store_stay_apart(paper_pack_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "both.duckdb"
    controlled = _config(
        tmp_path,
        "controlled",
        "",
        'languages = ["en"]\ncategories = ["emotions"]\ntrials_per_category = 6\n'
        "explicit_per_category = 0",
        'languages = ["en"]\nservices = ["gynecology"]\npairs_per_service = 4\n'
        'explanation = [false]\nsymptoms = ["none"]\nexplicit_per_service = 0',
    )
    paper = _config(
        tmp_path,
        "paper",
        f'design = "paper"\nstimuli = "{paper_pack_dir}"\n',
        'languages = ["en"]\ncategories = ["emotions"]\ntrials_per_category = 5\n'
        "explicit_per_category = 0",
        'languages = ["en"]\nservices = ["gynecology", "hiv"]\npairs_per_service = 3',
    )
    assert ibias.run(controlled, store=store).exit_code == 0
    assert ibias.run(paper, store=store).exit_code == 0

    with ibias.connect(store) as con:
        views = {
            view: dict(con.sql(f"SELECT design, count(*) FROM {view} GROUP BY 1").fetchall())
            for view in ("word_association_trials", "allocation_decisions")
        }
    assert views["word_association_trials"] == {"controlled": 6, "paper": 5}
    assert views["allocation_decisions"] == {"controlled": 8, "paper": 12}

    out = ibias.analyze(store, tmp_path / "out", bootstrap=50)
    cells = pl.read_csv(out.out_dir / "allocation_cells.csv")
    paper_cells = pl.read_csv(out.out_dir / "allocation_cells_paper.csv")
    assert cells["service"].to_list() == ["gynecology"]
    assert sorted(paper_cells["service"].to_list()) == ["gynecology", "hiv"]
    assert cells["trials"].to_list() == [8]
    assert paper_cells["trials"].sum() == 12
    wa = pl.read_csv(out.out_dir / "word_association_cells.csv")
    wa_paper = pl.read_csv(out.out_dir / "word_association_cells_paper.csv")
    assert (wa["trials"].to_list(), wa_paper["trials"].to_list()) == ([6], [5])
    assert "design" not in wa.columns  # the split is by file, the columns are unchanged
    figures = {p.relative_to(out.out_dir).parts[0] for p in out.figures}
    assert "paper" in figures
    assert any(p.parent == out.out_dir for p in out.figures)
    page = out.report.read_text("utf-8")
    for title in ("Word association (paper design)", "Appointment allocation (paper design)"):
        assert title in page
    assert "id='allocation-paper'" in page and "href='#allocation-paper'" in page
    # Both designs get population intervals, their pairs' people read from the items.
    pop = pl.read_csv(out.out_dir / "allocation_population.csv")
    pop_paper = pl.read_csv(out.out_dir / "allocation_population_paper.csv")
    assert pop["pairs"].to_list() == cells["pairs"].to_list()
    assert sorted(pop_paper["pairs"].to_list()) == sorted(paper_cells["pairs"].to_list())
    assert set(pop_paper["target"].to_list()) == {"people like these"}
    assert (pop_paper["cis_persons"] <= pop_paper["pairs"]).all()

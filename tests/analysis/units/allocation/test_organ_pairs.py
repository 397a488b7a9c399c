"""The paper design's allocation results split by who in the pair has the organ, checked
against a count made here from the pack's CSV files and the stored decisions."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pytest

import ibias
from tests.analysis.test_paper_stats import section

CONFIG = """
[run]
seed = 11

[[models]]
id = "sim"
provider = "simulator"
max_concurrency = 16

[models.sim]
allocation_cis_default = 0.7

[experiments.allocation]
design = "paper"
stimuli = "{pack}"
languages = ["en"]
services = ["prostate_study", "hiv"]
{pairs}
"""


def run_and_analyse(folder: Path, pack: Path, pairs: str = "") -> ibias.AnalysisResult:
    folder.mkdir()
    config = folder / "c.toml"
    config.write_text(CONFIG.format(pack=pack, pairs=pairs), "utf-8")
    assert ibias.run(config, store=folder / "s.duckdb").exit_code == 0
    return ibias.analyze(folder / "s.duckdb", folder / "out", bootstrap=50)


def by_hand(pack: Path, store: Path) -> dict[str, Counter[str]]:
    """Composition of each released prostate pair from people.csv and pairs.csv, then the
    stored choices counted per composition."""
    with (pack / "allocation" / "people.csv").open(encoding="utf-8", newline="") as fh:
        sex = [row["Sex assigned at birth"] for row in csv.DictReader(fh)]
    kind_of: dict[str, str] = {}
    with (pack / "allocation" / "pairs.csv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["service"] == "prostate_study":
                has = (sex[int(row["cis_person"]) - 1] == "man",
                       sex[int(row["trans_person"]) - 1] == "man")  # fmt: skip
                kind_of[f"paper:prostate_study:{row['pair']}"] = {
                    (True, True): "both", (True, False): "only_cis",
                    (False, True): "only_trans", (False, False): "neither",
                }[has]  # fmt: skip
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            "SELECT pair_id, chosen FROM allocation_decisions WHERE service = 'prostate_study'"
        ).fetchall()
    finally:
        con.close()
    out: dict[str, Counter[str]] = {}
    for pair_id, chosen in rows:
        out.setdefault(kind_of[pair_id], Counter())[chosen] += 1
    return out


def test_released_pairs_are_split_by_composition(tmp_path: Path, paper_pack_dir: Path) -> None:
    result = run_and_analyse(tmp_path / "released", paper_pack_dir)
    table = pl.read_csv(result.out_dir / "paper_organ_pairs.csv")
    assert set(table["service"].to_list()) == {"prostate_study"}  # hiv is about no organ
    rows = {r["composition"]: r for r in table.iter_rows(named=True)}
    assert {k: rows[k]["pairs"] for k in ("both", "only_cis", "only_trans", "neither")} == {
        "both": 21, "only_cis": 20, "only_trans": 39, "neither": 20,
    }  # fmt: skip
    counted = by_hand(paper_pack_dir, tmp_path / "released" / "s.duckdb")
    for kind, chosen in counted.items():
        assert (rows[kind]["n_cis"], rows[kind]["n_trans"], rows[kind]["n_none"]) == (
            chosen["cis"], chosen["trans"], chosen["none"],
        )  # fmt: skip
        decided = chosen["cis"] + chosen["trans"]
        assert rows[kind]["trans_share"] == pytest.approx(chosen["trans"] / decided)
    assert rows["all"]["trials"] == 200
    html = section(result)
    assert "Pairs by who has the organ" in html
    assert "both 21, only cis 20, only trans 39, neither 20" in html


def test_sex_matched_pairs_need_no_split(tmp_path: Path, paper_pack_dir: Path) -> None:
    result = run_and_analyse(tmp_path / "matched", paper_pack_dir, 'pairs = "sex_matched"')
    assert pl.read_csv(result.out_dir / "paper_organ_pairs.csv").is_empty()
    assert "Pairs by who has the organ" not in section(result)

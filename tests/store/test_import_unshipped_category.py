"""Imported word-association tests of other studies: a category ibias does not ship is scored
and analysed like a shipped one when the item carries its labels and its words with their
sentiments; a word without its sentiment, or equal labels, is refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

import ibias
from tests.helpers import IBIAS

ITEM = {
    "category": "urban_rural_study",
    "target_label": "urban",
    "reference_label": "rural",
    "words": [
        {"word": "joy", "sentiment": "positive"},
        {"word": "calm", "sentiment": "positive"},
        {"word": "warm", "sentiment": "positive"},
        {"word": "cold", "sentiment": "negative"},
        {"word": "grim", "sentiment": "negative"},
        {"word": "sour", "sentiment": "negative"},
    ],
}
# urban (target): joy +, cold -, grim -  -> P_t = 1, N_t = 2
# rural (reference): calm +, warm +, sour - -> P_r = 2, N_r = 1
# bias = N_t / (P_t + N_t) + P_r / (P_r + N_r) - 1 = 2/3 + 2/3 - 1 = 1/3
REPLY = "joy - urban\ncalm - rural\nwarm - rural\ncold - urban\ngrim - urban\nsour - rural"


def import_lines(tmp_path: Path, items: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "other_study.jsonl"
    rows = [
        {"experiment": "word_association", "model_id": "ext", "language": "en", "item": item,
         "content": REPLY, "id": i}
        for i, item in enumerate(items)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return subprocess.run(
        [*IBIAS, "import", str(path), "--store", str(tmp_path / "s.duckdb")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_an_unshipped_category_is_scored_exactly(tmp_path: Path) -> None:
    done = import_lines(tmp_path, [ITEM, ITEM])
    assert done.returncode == 0, done.stderr
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT category, n_pos_target, n_neg_target, n_pos_reference, n_neg_reference, bias "
            "FROM word_association_trials"
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 2
    for category, p_t, n_t, p_r, n_r, bias in rows:
        assert (category, p_t, n_t, p_r, n_r) == ("urban_rural_study", 1, 2, 2, 1)
        assert bias == pytest.approx(1 / 3, abs=1e-12)
    result = ibias.analyze(tmp_path / "s.duckdb", tmp_path / "out", bootstrap=50)
    frames = [pl.read_parquet(p) for p in result.out_dir.glob("word_association*.parquet")]
    analysed = [f for f in frames if "category" in f.columns]
    assert any("urban_rural_study" in f["category"].cast(pl.String).to_list() for f in analysed)


BAD = {
    "word without sentiment": (
        {**ITEM, "words": [{"word": "joy"}, *ITEM["words"][1:]]},
        "sentiment",
    ),
    "equal labels": ({**ITEM, "reference_label": "urban"}, "must differ"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_item_of_an_unshipped_category_is_one_line(tmp_path: Path, case: str) -> None:
    item, says = BAD[case]
    done = import_lines(tmp_path, [item])
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr

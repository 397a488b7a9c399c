"""The report's "How this run differs from the paper" marks our texts in the paper design's
explanation and symptom conditions."""

from __future__ import annotations

import polars as pl

from ibias.analysis.units.allocation.unit import _paper


def test_paper_design_conditions_are_marked_ours() -> None:
    decisions = pl.DataFrame(
        {
            "design": ["paper"] * 4,
            "language": ["en", "en", "en", "es"],
            "explanation": [False, True, False, True],
            "symptoms": ["none", "none", "high", "low"],
        }
    )
    explicit = pl.DataFrame(
        {"experiment": [], "language": []}, schema={"experiment": pl.Utf8, "language": pl.Utf8}
    )
    sources = _paper({"allocation": decisions}, explicit, {}).sources
    ours = {(r["language"], r["condition"]): r["ours"] for r in sources.iter_rows(named=True)}
    assert ours[("en", "without explanation, no symptoms")] == ""
    assert ours[("en", "with explanation, no symptoms")] == (
        "the instruction to explain (the paper's was not released)"
    )
    assert (
        "symptom lists (the paper's were not released)"
        in ours[("en", "without explanation, high-urgency symptoms")]
    )
    spanish = ours[("es", "with explanation, low-urgency symptoms")]
    for part in ("Spanish scenario texts", "instruction to explain", "symptom lists"):
        assert part in spanish


def test_swapped_trials_are_their_own_row_marked_ours() -> None:
    decisions = pl.DataFrame(
        {
            "design": ["paper", "paper"],
            "language": ["en", "en"],
            "explanation": [False, False],
            "symptoms": ["none", "none"],
            "identity_swap": [None, True],
        }
    )
    explicit = pl.DataFrame(
        {"experiment": [], "language": []}, schema={"experiment": pl.Utf8, "language": pl.Utf8}
    )
    rows = list(_paper({"allocation": decisions}, explicit, {}).sources.iter_rows(named=True))
    assert [(r["condition"], r["trials"]) for r in rows] == [
        ("without explanation, no symptoms", 1),
        ("without explanation, no symptoms, identities swapped", 1),
    ]
    assert rows[0]["ours"] == "" and "identity-swap control (not in the paper)" in rows[1]["ours"]

"""The condition effects' units (`effects.effect_units`) and per-side sums (`effect_sums`),
built from each pair's sums spread over the conditions, against a count by hand from the trials:
for every model x language x service, each contrast (explanation yes - no within each symptoms
level and pooled; high or low symptoms - none within each explanation level and pooled), each
pair's transgender choices and trials on either side; a contrast only where both sides were run
somewhere in its cell. Generated over sparse grids (conditions and pairs missing, orders
repeated, unusual symptom levels), and the stacked path kept for trials lacking a condition
agrees with it wherever both apply."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from ibias.analysis.cells import CELL
from ibias.analysis.units.allocation import effects

Key = tuple[str, str, str, str, str]  # model, language, service, effect, stratum
Sides = tuple[int, int, int, int]  # t1, n1, t0, n0

SCHEMA = {
    "model_id": pl.String,
    "language": pl.String,
    "service": pl.String,
    "explanation": pl.Boolean,
    "symptoms": pl.String,
    "pair_id": pl.String,
    "chosen": pl.String,
}
ROW = st.tuples(
    st.sampled_from(["m1", "m2"]),
    st.sampled_from(["en", "es"]),
    st.sampled_from(["hiv", "organ"]),
    st.booleans(),
    st.sampled_from(["none", "none", "high", "low", "mild"]),
    st.sampled_from(["p01", "p02", "p10", "Ñ1", "p3"]),
    st.sampled_from(["cis", "trans", "trans", "none"]),
)


def _frame(rows: Iterable[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(
        list(rows),
        schema=SCHEMA,
        orient="row",
    )


def _side(effect: str, stratum: str, expl: bool, symptoms: str) -> int | None:
    """Which side of the contrast a trial is on (0 treated, 2 control), None if outside it."""
    if effect == "explanation":
        if stratum not in ("all", symptoms):
            return None
        return 0 if expl else 2
    level = effect.removeprefix("symptoms_")
    wanted = {"all": None, "explanation=yes": True, "explanation=no": False}[stratum]
    if wanted not in (None, expl) or symptoms not in (level, "none"):
        return None
    return 0 if symptoms == level else 2


def by_hand(rows: list[tuple[object, ...]]) -> dict[Key, dict[str, Sides]]:
    """Every contrast cell run on both sides: its pairs with trials on either side."""
    strata = {str(r[4]) for r in rows} | {"all"}
    contrasts = [("explanation", s) for s in strata] + [
        (f"symptoms_{level}", s)
        for level in ("high", "low")
        for s in ("all", "explanation=yes", "explanation=no")
    ]
    cells: dict[Key, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0] * 4))
    for model, lang, service, expl, symptoms, pair, chosen in rows:
        for effect, stratum in contrasts:
            side = _side(effect, stratum, bool(expl), str(symptoms))
            if side is not None:
                sums = cells[(str(model), str(lang), str(service), effect, stratum)][str(pair)]
                sums[side] += chosen == "trans"
                sums[side + 1] += 1
    return {
        key: {pair: (s[0], s[1], s[2], s[3]) for pair, s in pairs.items()}
        for key, pairs in cells.items()
        if any(s[1] for s in pairs.values()) and any(s[3] for s in pairs.values())
    }


def _got(units: pl.DataFrame, cells: pl.DataFrame) -> dict[Key, dict[str, Sides]]:
    keys = cells.select(CELL, *effects.EFFECT_KEYS).rows_by_key(CELL, unique=True)
    out: dict[Key, dict[str, Sides]] = defaultdict(dict)
    for cell, pair, t1, n1, t0, n0 in units.iter_rows():
        out[keys[cell]][pair] = (t1, n1, t0, n0)
    return dict(out)


@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=60))
def test_units_are_each_pairs_sides_counted_by_hand(rows: list[tuple[object, ...]]) -> None:
    decisions = _frame(rows)
    units, cells = effects.effect_units(decisions)
    # Pair codes replace the ids in their sorted order: map them back to compare.
    ids = sorted({str(r[5]) for r in rows})
    named = units.with_columns(pl.col("pair_id").map_elements(lambda c: ids[c - 1], pl.String))
    assert _got(named, cells) == by_hand(rows)
    # Cells numbered in their keys' sorted order, units sorted by cell then pair.
    assert cells.sort(effects.EFFECT_KEYS)[CELL].to_list() == list(range(cells.height))
    assert units.select(CELL, "pair_id").rows() == sorted(units.select(CELL, "pair_id").rows())


@settings(max_examples=100, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=60))
def test_per_side_sums_are_the_units_split(rows: list[tuple[object, ...]]) -> None:
    decisions = _frame(rows)
    sums, sum_cells = effects.effect_sums(decisions)
    units, cells = effects.effect_units(decisions)
    assert_frame_equal(sum_cells, cells)  # numbered alike
    keyed = sums.join(cells, on=CELL)
    got: dict[tuple[object, ...], list[int]] = defaultdict(lambda: [0] * 4)
    for row in keyed.iter_rows(named=True):
        key = (*(row[k] for k in effects.EFFECT_KEYS), row["pair_id"])
        assert row["n"] > 0
        at = 0 if row["treated"] else 2
        got[key][at : at + 2] = [row["t"], row["n"]]
    want = {
        (*keys, pair): list(sides)
        for (cell, pair, *sides) in units.iter_rows()
        for keys in [cells.filter(pl.col(CELL) == cell).select(effects.EFFECT_KEYS).row(0)]
    }
    assert dict(got) == want


@settings(max_examples=100, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=60))
def test_the_stacked_path_agrees_where_every_trial_has_its_conditions(
    rows: list[tuple[object, ...]],
) -> None:
    summed = (
        _frame(rows)
        .with_columns(pl.concat_str("model_id", "language", "service").rank("dense").alias("_base"))
        .group_by("_base", "explanation", "symptoms", "pair_id")
        .agg((pl.col("chosen") == "trans").sum().cast(pl.Int64).alias("t"), pl.len().alias("n"))
    )
    order = [*effects.EFFECT_CELL, "pair_id"]
    spread = effects._spread_units(summed, ()).select(*order, "t1", "n1", "t0", "n0").sort(order)
    stacked = effects._stacked_units(summed, ()).select(spread.columns).sort(order)
    assert_frame_equal(spread, stacked, check_dtypes=False)


def test_trials_lacking_a_condition_take_the_stacked_path() -> None:
    rows = [
        ("m", "en", "hiv", True, "none", "p1", "trans"),
        ("m", "en", "hiv", False, "none", "p1", "cis"),
        ("m", "en", "hiv", True, None, "p1", "trans"),
    ]
    units, cells = effects.effect_units(_frame(rows))
    # The trial without a symptoms level joins the pooled explanation contrast only.
    got = _got(units.with_columns(pl.lit("p1").alias("pair_id")), cells)
    assert got[("m", "en", "hiv", "explanation", "all")] == {"p1": (2, 2, 0, 1)}
    assert got[("m", "en", "hiv", "explanation", "none")] == {"p1": (1, 1, 0, 1)}

"""Allocation results of the paper design split by who in the pair has the organ.

For a service about an organ of one sex assigned at birth (`prompts/stimuli/composition.py`:
prostate_study, gynecology, transvaginal_ultrasound), a pair where only one person has the organ
is not a test of bias: choosing that person is medical need. The authors' prostate pairs mix
sexes (their filter matched "man" inside "woman"), so the pooled share they report mixes four
kinds of pair. `organ_pairs_table` gives, per model x language x service x condition and per
composition (both / only_cis / only_trans / neither, and `all`), the pairs, trials and choices
of the paper design's original arm, for every service whose trials hold more than one kind;
`organ_pairs_sentences` says what that does to the result, pooled over models, for the report's
"How this run differs from the paper".
"""

from __future__ import annotations

import polars as pl

from ibias.prompts.codes import CIS, NO_CHOICE, PAPER, TRANS
from ibias.prompts.stimuli.composition import KINDS, ORGAN_SERVICES

ALL = "all"
SEX = {"woman": "female", "man": "male"}
"""The roster's spelling of sex assigned at birth -> the stored one."""

COLUMNS: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
    "composition": pl.String(),
    "pairs": pl.Int64(),
    "trials": pl.Int64(),
    "n_cis": pl.Int64(),
    "n_trans": pl.Int64(),
    "n_none": pl.Int64(),
    "trans_share": pl.Float64(),
}
"""`paper_organ_pairs`: `trans_share` = n_trans / (n_cis + n_trans), null when none decided."""

_GROUP = ["model_id", "language", "service", "explanation", "symptoms"]


def _compositions(organ_pairs: pl.DataFrame) -> pl.DataFrame:
    """trial_key -> composition, from the candidates' groups and sexes as shown."""
    rows = []
    for key, identity0, sex0, identity1, sex1 in organ_pairs.rows():
        people = {identity0: sex0, identity1: sex1}
        rows.append({"trial_key": key, "cis_sex": people.get(CIS), "trans_sex": people.get(TRANS)})
    return pl.DataFrame(
        rows, schema={"trial_key": pl.String(), "cis_sex": pl.String(), "trans_sex": pl.String()}
    )


def _kind(service: str, cis_sex: str | None, trans_sex: str | None) -> str:
    sex = SEX[ORGAN_SERVICES[service].sex]
    has_cis, has_trans = cis_sex == sex, trans_sex == sex
    if has_cis and has_trans:
        return KINDS[0]
    if has_cis:
        return KINDS[1]
    return KINDS[2] if has_trans else KINDS[3]


def organ_pairs_table(decisions: pl.DataFrame | None, organ_pairs: pl.DataFrame) -> pl.DataFrame:
    """The split (module docstring); empty when no organ service mixes kinds of pair.
    `decisions`: the allocation view of every design; `organ_pairs`: the candidates' groups
    and sexes of the paper-design organ-service trials (`load.ORGAN_PAIRS`)."""
    if decisions is None or decisions.is_empty() or organ_pairs.is_empty():
        return pl.DataFrame(schema=COLUMNS)
    original = decisions.filter(
        (pl.col("design") == PAPER)
        & pl.col("service").is_in(list(ORGAN_SERVICES))
        & pl.col("identity_swap").fill_null(False).not_()
    ).join(_compositions(organ_pairs), on="trial_key", how="inner")
    if original.is_empty():
        return pl.DataFrame(schema=COLUMNS)
    kinds = [
        _kind(s, c, t) for s, c, t in original.select("service", "cis_sex", "trans_sex").iter_rows()
    ]
    original = original.with_columns(pl.Series("composition", kinds, dtype=pl.String()))
    mixed = (
        original.group_by("service")
        .agg(pl.col("composition").n_unique().alias("kinds"))
        .filter(pl.col("kinds") > 1)["service"]
        .to_list()
    )
    original = original.filter(pl.col("service").is_in(mixed))
    if original.is_empty():
        return pl.DataFrame(schema=COLUMNS)
    both = pl.concat(
        [original, original.with_columns(pl.lit(ALL).alias("composition"))], how="vertical"
    )
    chosen = pl.col("chosen")
    table = both.group_by([*_GROUP, "composition"]).agg(
        pl.col("pair_id").n_unique().cast(pl.Int64).alias("pairs"),
        pl.len().cast(pl.Int64).alias("trials"),
        (chosen == CIS).sum().cast(pl.Int64).alias("n_cis"),
        (chosen == TRANS).sum().cast(pl.Int64).alias("n_trans"),
        (chosen == NO_CHOICE).sum().cast(pl.Int64).alias("n_none"),
    )
    decided = pl.col("n_cis") + pl.col("n_trans")
    table = table.with_columns(
        pl.when(decided > 0).then(pl.col("n_trans") / decided).otherwise(None).alias("trans_share")
    )
    order = {k: i for i, k in enumerate((ALL, *KINDS))}
    return (
        table.with_columns(pl.col("composition").replace_strict(order).alias("_o"))
        .sort([*_GROUP, "_o"])
        .drop("_o")
        .select(list(COLUMNS))
    )


def organ_pairs_sentences(table: pl.DataFrame) -> list[str]:
    """Per service, in numbers from the table: its pairs by composition and the transgender
    share of decided trials in each, pooled over models, languages and conditions."""
    out: list[str] = []
    if table.is_empty():
        return out
    for service in sorted(set(table["service"].to_list())):
        rows = table.filter(pl.col("service") == service)
        pooled = rows.group_by("composition").agg(
            pl.col("n_cis").sum(), pl.col("n_trans").sum(), pl.col("trials").sum()
        )
        pairs = (
            rows.filter(pl.col("composition") != ALL)
            .group_by("composition")
            .agg(pl.col("pairs").max())
        )
        counts = dict(pairs.rows())
        parts = [f"{kind.replace('_', ' ')} {counts.get(kind, 0)}" for kind in KINDS]
        shares = []
        for kind, n_cis, n_trans, _trials in sorted(
            pooled.rows(), key=lambda r: (ALL, *KINDS).index(r[0])
        ):
            decided = n_cis + n_trans
            share = "—" if decided == 0 else f"{100 * n_trans / decided:.1f}%"
            shares.append(f"{kind.replace('_', ' ')} {share} of {decided:,}")
        organ = ORGAN_SERVICES[service]
        out.append(
            f"{service}: the pairs by who has the {organ.organ} (sex assigned at birth "
            f"{organ.sex!r}): {', '.join(parts)}. Transgender share of decided trials, all "
            f"models: {'; '.join(shares)}. Where only one person has the organ, choosing them "
            "is medical need, not bias: compare the 'both' share with the pooled one "
            '(pairs = "sex_matched" runs same-sex pairs; paper_organ_pairs.csv per model).'
        )
    return out

"""The word-association unit's planted-value check (`ExperimentAnalysis.planted`): per
simulated model x language, the planted `word_bias` and the expected score of a scored trial,
`expected_word_score` (templates drawn uniformly; not 2p - 1), overall and per template, beside
the estimate of `word_association_overall` and whether its interval contains the expected score.
The values come from the unit's planted-value functions, looked up by name
(`prompts.simulation`), so nothing of the simulator's code is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ibias.analysis.experiment import PlantedCheck, PlantedContext, PlantedCoverage, PlantedResult
from ibias.analysis.planted import (
    SimulatedModel,
    inside,
    interval_labels,
    required_truth,
    yes_no,
)

TEMPLATES: tuple[int, ...] = (1, 2, 3)
TABLE = "planted_word_association"
#: What the word-association intervals are about: they resample trials, the model's answers.
TARGET = "these stimuli"


def word_association_table(models: Sequence[SimulatedModel], overall: pl.DataFrame) -> pl.DataFrame:
    """Per simulated model x language: planted word bias, expected score (overall and per
    template) beside the estimate and its interval from `word_association_overall`."""
    rows = []
    for m in models:
        (word_bias, wa), (expected_word_score, _) = (
            required_truth(m, "word_bias"),
            required_truth(m, "expected_word_score"),
        )
        rows.append(
            {
                "model_id": m.model_id,
                "planted_word_bias": word_bias(wa),
                "expected_score": expected_word_score(wa),
                **{f"expected_template_{t}": expected_word_score(wa, t) for t in TEMPLATES},
            }
        )
    planted = pl.DataFrame(
        rows,
        schema={
            "model_id": pl.String(),
            "planted_word_bias": pl.Float64(),
            "expected_score": pl.Float64(),
            **{f"expected_template_{t}": pl.Float64() for t in TEMPLATES},
        },
    )
    estimates = overall.select(
        "model_id", "language", "scored", "mean_bias", "ci_low", "ci_high",
        *[f"bias_template_{t}" for t in TEMPLATES],
    )  # fmt: skip
    table = planted.join(estimates, on="model_id", how="inner")
    return table.with_columns(inside("expected_score", "ci_low", "ci_high").alias("inside_ci"))


def planted_tables(ctx: PlantedContext) -> PlantedResult:
    """`planted_word_association` with its intervals' labels, and its coverage row; nothing
    when the store has no word-association estimates."""
    overall = ctx.tables.get("word_association_overall")
    if overall is None:
        return PlantedResult({})
    table = word_association_table(ctx.models, overall).with_columns(
        interval_labels(overall, TARGET)
    )
    rows: tuple[PlantedCoverage, ...] = ()
    if not table.is_empty():
        rows = (PlantedCoverage("word-association mean score", table["inside_ci"], TARGET),)
    return PlantedResult({TABLE: table}, rows)


def section(tables: Mapping[str, pl.DataFrame]) -> str:
    """The word-association part of the planted-values section ("" without rows)."""
    frame = tables.get(TABLE)
    if frame is None or frame.is_empty():
        return ""
    return "".join(_part(frame))


def _part(wa: pl.DataFrame) -> list[str]:
    """The word-association rows: planted bias and expected scores beside the estimates."""
    from ibias.analysis import labels
    from ibias.analysis.report import Column, col, esc, interval, num, table

    parts: list[str] = []
    parts.append("<h3>Word association</h3>")
    parts.append(
        table(
            wa,
            [
                col("model", "model_id", text=True),
                col("language", "language", lambda v: esc(labels.language(str(v))), True),
                col("planted word bias", "planted_word_bias", lambda v: num(v, 2)),
                col("expected score", "expected_score", lambda v: num(v, 3)),
                Column(
                    "mean bias [95% CI]",
                    lambda r: f"{num(r['mean_bias'])} {interval(r['ci_low'], r['ci_high'], 3)}",
                ),
                Column(
                    "expected / estimated per template 1, 2, 3",
                    lambda r: " · ".join(
                        f"{num(r[f'expected_template_{t}'], 2)} / {num(r[f'bias_template_{t}'], 2)}"
                        for t in TEMPLATES
                    ),
                ),
                col("inside", "inside_ci", yes_no),
            ],
        )
    )
    return parts


PLANTED = PlantedCheck(tables=planted_tables, section=section)
"""The word-association analysis's planted-value check."""

"""Run-level summaries: what each model reported being, how often it refused or was unreadable,
and the explicit answers of every experiment.

A reader judging the bias tables needs these numbers first: a model that refused a third of the
prompts, or whose replies could not be parsed, is measured on a selected subset; and provider
model strings and system fingerprints say which model version actually answered (providers
update models behind a stable name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ibias.analysis.load import StoreData
from ibias.analysis.simulated import mark_of
from ibias.prompts import codes

# Answer columns of the explicit summary, in display order (WA and allocation vocabularies).
EXPLICIT_COLUMNS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [
            *codes.WORD_ASSOCIATION_EXPLICIT_ANSWERS[:3],
            codes.EQUAL,
            codes.REFUSED,
            codes.UNPARSEABLE,
            codes.EMPTY,
        ]
    )
)


def _explicit_outcomes(data: StoreData) -> pl.DataFrame:
    return data.explicit.select(
        "model_id",
        (pl.col("answer") == codes.REFUSED).alias("refused"),
        pl.col("answer").is_in([codes.UNPARSEABLE, codes.EMPTY]).alias("unparseable"),
    )


def _responses_by_model(responses: pl.DataFrame) -> pl.DataFrame:
    """Per model: responses, the provider-reported model names and fingerprints, and the
    finish reasons and outcomes the models table counts."""
    n = pl.col("n")
    return responses.group_by("model_id").agg(
        n.sum().cast(pl.Int64).alias("responses"),
        pl.col("provider_model")
        .drop_nulls()
        .unique()
        .sort()
        .str.join("; ")
        .alias("provider_models"),
        pl.col("system_fingerprint").drop_nulls().n_unique().cast(pl.Int64).alias("n_fingerprints"),
        pl.col("system_fingerprint")
        .drop_nulls()
        .unique()
        .sort()
        .head(5)
        .str.join("; ")
        .alias("fingerprints"),
        n.filter(pl.col("finish_reason") == "content_filter")
        .sum()
        .cast(pl.Int64)
        .alias("content_filtered"),
        n.filter(pl.col("finish_reason") == "length").sum().cast(pl.Int64).alias("truncated"),
        # store/outcome.py: no text and not withheld (never a refusal); a share of responses
        n.filter(pl.col("outcome") == "empty").sum().cast(pl.Int64).alias("empty"),
    )


def _parsed_by_model(data: StoreData, outcomes: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Per model: parsed trials (every experiment's and the explicit checks'), refusals and
    unparseable replies among them."""
    parsed = pl.concat(
        [*(o.select("model_id", "refused", "unparseable") for o in outcomes),
         _explicit_outcomes(data)],
        how="vertical",
    )  # fmt: skip
    return parsed.group_by("model_id").agg(
        pl.len().cast(pl.Int64).alias("parsed"),
        pl.col("refused").sum().cast(pl.Int64).alias("refusals"),
        pl.col("unparseable").sum().cast(pl.Int64).alias("unparseable"),
    )


_COUNTS = (
    "planned", "done", "failed", "responses", "parsed", "refusals", "unparseable",
    "content_filtered", "truncated", "empty", "n_fingerprints",
)  # fmt: skip
"""The models table's counts, 0 for a model with none."""


def _rate(count: str, over: str) -> pl.Expr:
    return pl.when(pl.col(over) > 0).then(pl.col(count) / pl.col(over))


def _simulated(models: pl.Series, simulated: Mapping[str, str]) -> pl.Series:
    """The `simulated` column: "rehearsal: simulated replies", "simulated" or null
    (analysis/simulated.py), so the table never shows a simulated model as a real one."""
    return pl.Series(
        "simulated", [mark_of(str(m), simulated) for m in models.to_list()], dtype=pl.String
    )


def models_table(data: StoreData, outcomes: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Per model: whether it was simulated, provider-reported versions, fingerprints,
    responses, refusal/unparseable rates.

    `outcomes` holds each experiment's parsed trials as (model_id, refused, unparseable); rates
    are over those and the explicit checks. Ad-hoc `prompts` responses have no parser and count
    only in `responses`.
    """
    responses = _responses_by_model(data.responses)
    progress = data.progress.group_by("model_id").agg(
        pl.col("planned").sum().cast(pl.Int64).alias("planned"),
        pl.col("done").sum().cast(pl.Int64).alias("done"),
        pl.col("failed").sum().cast(pl.Int64).alias("failed"),
    )
    models = pl.concat(
        [f.select("model_id") for f in (progress, responses)], how="vertical"
    ).unique()
    table = (
        models.join(progress, on="model_id", how="left")
        .join(responses, on="model_id", how="left")
        .join(_parsed_by_model(data, outcomes), on="model_id", how="left")
        .with_columns(pl.col(*_COUNTS).fill_null(0))
        .with_columns(
            _rate("refusals", "parsed").alias("refusal_rate"),
            _rate("unparseable", "parsed").alias("unparseable_rate"),
            _rate("empty", "responses").alias("empty_rate"),
        )
        .sort("model_id")
    )
    table = table.with_columns(_simulated(table["model_id"], data.simulated))
    return table.select(
        "model_id", "simulated", "provider_models", "n_fingerprints", "fingerprints", "planned",
        "done", "failed", "responses", "parsed", "refusals", "refusal_rate", "empty", "empty_rate",
        "unparseable", "unparseable_rate", "content_filtered", "truncated",
    )  # fmt: skip


def explicit_summary(data: StoreData) -> pl.DataFrame:
    """Counts per answer for every explicit experiment x model x language x subject."""
    keys = ["experiment", "model_id", "language", "subject"]
    rows = data.explicit
    others = sorted(set(rows["answer"].unique().to_list()) - set(EXPLICIT_COLUMNS))
    answers = [*EXPLICIT_COLUMNS, *others]
    if rows.is_empty():
        schema: dict[str, pl.DataType] = {k: pl.String() for k in keys}
        schema["n"] = pl.Int64()
        schema.update({a: pl.Int64() for a in answers})
        return pl.DataFrame(schema=schema)
    return (
        rows.group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            *[(pl.col("answer") == a).sum().cast(pl.Int64).alias(a) for a in answers],
        )
        .sort(keys)
    )


def experiments_present(data: StoreData) -> dict[str, int]:
    """Planned trials per experiment (from `progress`), so the report can say what is absent."""
    by = data.progress.group_by("experiment").agg(pl.col("planned").sum()).sort("experiment")
    return {str(e): int(n) for e, n in by.iter_rows()}

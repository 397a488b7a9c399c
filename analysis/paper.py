"""The report's "How this run differs from the paper", generated from the store.

A number from ibias is only comparable with the paper's if the reader knows what in the run was
the paper's and what was not. This section says, from what the store holds:

- **texts**: per experiment, design, language and condition, which texts came from the
  authors' stimuli pack and which are ours (each experiment's analysis supplies its rule,
  `ExperimentAnalysis.paper`, so this module never names an experiment);
- **models**: which of the paper's models ran, under which provider name, which rows stand in
  for another model, and which the provider has retired, read from the run configs' model
  annotations (below) and the model strings the providers reported;
- **parsers and scores** behind each experiment's headline figures;
- **known problems** of the paper's own released numbers.

Model annotations. The config schema has no key for "this row stands in for the paper's X", so
a `[[models]]` block carries it in comments the runner ignores and this module reads from the
run's stored config text: lines `#@ key = "value"` inside the block (after `[[models]]`, before
the next table that is not one of its subtables). Keys: `paper_name` (the paper's name for the
model this row is), `substitute_for` (the paper's model this row stands in for: it is not that
model), `retired` (the provider retired or will retire it: when, and the source), `note`
(anything else). Other keys are shown under the note. A row with no annotation is "not
annotated": ibias cannot tell whether it is one of the paper's models.

A simulated model (a rehearsal's, the `simulator` provider's, or one whose replies say they come
from ibias's simulator: analysis/simulated.py) is never one of the paper's models, whatever its
annotation says: its status is "simulated" ("rehearsal: simulated replies" in a rehearsal's
store), and no sentence counts it among the paper's models that ran.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ibias.analysis import labels
from ibias.analysis.experiment import SOURCE_COLUMNS, ExperimentAnalysis, PaperComparison
from ibias.analysis.load import StoreData
from ibias.analysis.report import DIFFERENCES, Column, absent, col, count, esc, prose, table
from ibias.analysis.simulated import REHEARSAL_MARK, mark_of
from ibias.prompts.codes import PAPER

PAPER_MODELS: tuple[str, ...] = (
    "GPT 4o mini",
    "GPT 4o",
    "Gemini 2.0 Flash",
    "Gemini 2.0 Flash Lite",
    "Grok 3",
    "Grok 3 mini",
    "Llama 3 70B",
)
"""The seven models as the paper names them (its Figures 1 and 2)."""

ANNOTATION_KEYS: tuple[str, ...] = ("paper_name", "substitute_for", "retired", "note")
_ANNOTATION = re.compile(r"^\s*#@\s*(?P<body>\S.*)$")
_TABLE_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(?:#.*)?$")

MODEL_COLUMNS: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "status": pl.String(),
    "simulated": pl.String(),
    "paper_name": pl.String(),
    "substitute_for": pl.String(),
    "provider": pl.String(),
    "configured_model": pl.String(),
    "reported_models": pl.String(),
    "retired": pl.String(),
    "note": pl.String(),
}

PAPER_MODEL = "paper's model"
SUBSTITUTE = "substitute"
NOT_ANNOTATED = "not annotated"


# --------------------------------------------------------------------------------------------
# Model annotations
# --------------------------------------------------------------------------------------------


def model_annotations(config_text: str) -> dict[str, dict[str, str]]:
    """`#@` annotations per model id, from one config's text (module docstring).

    Blocks are matched to the parsed `[[models]]` entries by order; a config that does not
    parse, or whose `[[models]]` headers do not line up with its entries, gives none.
    """
    try:
        config = tomllib.loads(config_text)
    except tomllib.TOMLDecodeError:
        return {}
    entries = config.get("models")
    if not isinstance(entries, list):
        return {}
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in config_text.splitlines():
        header = _TABLE_HEADER.match(line)
        if header and not line.lstrip().startswith("#"):
            name = header.group("name")
            if line.lstrip().startswith("[[") and name == "models":
                current = {}
                blocks.append(current)
            elif not name.startswith("models."):
                current = None
            continue
        found = _ANNOTATION.match(line)
        if found is None or current is None:
            continue
        try:
            parsed = tomllib.loads(found.group("body"))
        except tomllib.TOMLDecodeError:
            continue
        for key, value in parsed.items():
            if key in ANNOTATION_KEYS:
                current[key] = str(value)
            else:
                extra = f"{key}: {value}"
                current["note"] = f"{current['note']}; {extra}" if "note" in current else extra
    if len(blocks) != len(entries):
        return {}
    out: dict[str, dict[str, str]] = {}
    for entry, block in zip(entries, blocks, strict=True):
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            out[entry["id"]] = {**block, "_provider": str(entry.get("provider", "")),
                                "_model": str(entry.get("model", ""))}  # fmt: skip
    return out


def models_table(data: StoreData) -> pl.DataFrame:
    """One row per model in the store: what the paper called it, whether it stands in for
    another, what the config asked for and the providers reported, retirement notes.

    The newest run's config that names a model id describes it (a later run may have moved a
    model to another host)."""
    described: dict[str, dict[str, str]] = {}
    for text in data.runs.sort("started_at", descending=True)["config"].to_list():
        for model_id, notes in model_annotations(str(text)).items():
            described.setdefault(model_id, notes)
    reported = (
        data.responses.group_by("model_id")
        .agg(pl.col("provider_model").drop_nulls().unique().sort().str.join("; "))
        .rows()
    )
    reported_by = {str(m): str(r) for m, r in reported}
    present = sorted(
        set(data.progress["model_id"].to_list()) | set(data.responses["model_id"].to_list())
    )
    rows = []
    for model_id in present:
        notes = described.get(model_id, {})
        simulated = mark_of(model_id, data.simulated)
        if simulated is not None:  # never the paper's model, whatever its annotation says
            status = simulated
        elif notes.get("substitute_for"):
            status = SUBSTITUTE
        elif notes.get("paper_name"):
            status = PAPER_MODEL
        else:
            status = NOT_ANNOTATED
        rows.append(
            {
                "model_id": model_id,
                "status": status,
                "simulated": simulated,
                "paper_name": notes.get("paper_name"),
                "substitute_for": notes.get("substitute_for"),
                "provider": notes.get("_provider") or None,
                "configured_model": notes.get("_model") or None,
                "reported_models": reported_by.get(model_id) or None,
                "retired": notes.get("retired"),
                "note": notes.get("note"),
            }
        )
    return pl.DataFrame(rows, schema=MODEL_COLUMNS)


# --------------------------------------------------------------------------------------------
# The experiments' comparisons
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One experiment's comparison, with the title the report gives it."""

    title: str
    comparison: PaperComparison


def compare(parts: Sequence[ExperimentAnalysis], data: StoreData) -> list[Comparison]:
    """Every experiment's comparison that has something in the store."""
    out = []
    for part in parts:
        if part.paper is None:
            continue
        found = part.paper(data.views, data.explicit, data.extras)
        if not found.sources.is_empty():
            out.append(Comparison(part.title, found))
    return out


def sources_table(comparisons: Sequence[Comparison]) -> pl.DataFrame:
    """All experiments' source rows in one frame (`SOURCE_COLUMNS`)."""
    frames = [c.comparison.sources.select(list(SOURCE_COLUMNS)) for c in comparisons]
    if not frames:
        return pl.DataFrame(schema=SOURCE_COLUMNS)
    return pl.concat(frames, how="vertical")


# --------------------------------------------------------------------------------------------
# The report section
# --------------------------------------------------------------------------------------------

ANCHOR, TITLE = DIFFERENCES


def _designs_sentence(sources: pl.DataFrame) -> str:
    designs = set(sources["design"].drop_nulls().to_list())
    if not designs:
        return "This store holds no trial of an experiment the paper ran."
    if PAPER not in designs:
        return (
            "This store holds only ibias's controlled design: its texts, roster, pairing rule "
            "and conditions are ours, so its numbers measure the same questions as the paper "
            "but are not a replication of the paper's trials. Run the experiments with "
            '`design = "paper"` and a stimuli pack to set numbers beside the paper\'s.'
        )
    if designs == {PAPER}:
        return (
            "This store holds the paper's own design: the authors' texts, roster and pairs as "
            "released, with the parts they did not release (below) written by us."
        )
    return (
        "This store holds both designs, analysed apart: the paper's own design (the authors' "
        "texts, roster and pairs, with what they did not release written by us) and ibias's "
        "controlled design (our texts throughout)."
    )


def _sources_html(sources: pl.DataFrame) -> str:
    if sources.is_empty():
        return ""
    columns = [
        col("experiment", "experiment", text=True),
        col("design", "design", text=True),
        col("language", "language", lambda v: esc(labels.language(v)), text=True),
        col("condition", "condition", text=True),
        col("trials", "trials", count),
        Column("from the authors' pack", lambda r: esc(r["from_authors"] or "—"), wrap=True),
        Column("ours", lambda r: esc(r["ours"] or "—"), wrap=True),
    ]
    return table(sources, columns)


def _simulated_sentence(simulated: pl.DataFrame) -> str:
    listed = ", ".join(
        f"{r['model_id']} (annotated as {r['paper_name'] or r['substitute_for']})"
        if r["paper_name"] or r["substitute_for"]
        else str(r["model_id"])
        for r in simulated.iter_rows(named=True)
    )
    if (simulated["simulated"] == REHEARSAL_MARK).any():
        return (
            "Rehearsal: simulated replies. Every model of this store was answered by ibias's "
            "simulator (its answers carry the biases it planted, not any real model's), so none "
            f"is one of the paper's models, whatever its annotation says: {listed}."
        )
    return (
        "Simulated by ibias's simulator (its answers carry the biases it planted, not any real "
        f"model's), so not one of the paper's models, whatever its annotation says: {listed}."
    )


def _models_sentences(models: pl.DataFrame) -> list[str]:
    """Which of the paper's models ran, which are simulated, substituted, missing,
    unannotated or retired."""
    # A simulated model answers with the simulator's planted biases, whatever its annotation
    # says: it never counts as one of the paper's models having run.
    simulated = models.filter(pl.col("simulated").is_not_null())
    real = models.filter(pl.col("simulated").is_null())
    named = set(real["paper_name"].drop_nulls().to_list())
    standing_in = set(real["substitute_for"].drop_nulls().to_list())
    subs = real.filter(pl.col("status") == SUBSTITUTE)
    missing = [m for m in PAPER_MODELS if m not in named and m not in standing_in]
    ran = len(named & set(PAPER_MODELS))
    sentences = [
        f"{ran} of the paper's {len(PAPER_MODELS)} models ran as the paper named them (by the "
        "configs' #@ paper_name annotations)."
        if ran
        else f"None of the paper's {len(PAPER_MODELS)} models ran in this store under the "
        "paper's name."
    ]
    if not simulated.is_empty():
        sentences.append(_simulated_sentence(simulated))
    if not subs.is_empty():
        listed = "; ".join(
            f"{r['model_id']} ({r['configured_model'] or '?'}) stands in for {r['substitute_for']}"
            for r in subs.iter_rows(named=True)
        )
        sentences.append(f"Substituted: {listed}.")
    else:
        sentences.append("No model row is marked as a substitute.")
    if missing:
        sentences.append("Not in this store: " + ", ".join(missing) + ".")
    unannotated = models.filter(pl.col("status") == NOT_ANNOTATED)["model_id"].to_list()
    if unannotated:
        sentences.append(
            "Not annotated, so not known to be one of the paper's models: "
            + ", ".join(unannotated)
            + "."
        )
    retired = models.filter(pl.col("retired").is_not_null())["model_id"].to_list()
    if retired:
        sentences.append(
            "Retired (or scheduled for retirement) by their provider, per the config: "
            + ", ".join(retired)
            + "; a rerun of these rows needs another host or fails for that model only."
        )
    return sentences


def _paper_model_cell(row: Mapping[str, object]) -> str:
    """The paper's model a row is (or stands in for); for a simulated row, only what its
    annotation claims, said to be a claim (a simulated model is never the paper's)."""
    named = row["paper_name"] or row["substitute_for"]
    if row["simulated"] is not None:
        claimed = f"; annotated as {named}" if named else ""
        return f"<em>none ({esc(row['simulated'])}{esc(claimed)})</em>"
    return esc(named or "—")


_MODEL_COLUMNS: tuple[Column, ...] = (
    col("model", "model_id", text=True),
    col("status", "status", text=True),
    Column("paper's model", _paper_model_cell, text=True),
    Column(
        "configured (provider)",
        lambda r: (
            f"{esc(r['configured_model'] or '—')}"
            f"<br><span class='muted small'>{esc(r['provider'] or '')}</span>"
        ),
        text=True,
    ),
    Column("reported by provider", lambda r: esc(r["reported_models"] or "—")),
    Column("retired", lambda r: esc(r["retired"] or "—"), wrap=True),
    Column("note", lambda r: esc(r["note"] or "—"), wrap=True),
)


def _models_html(models: pl.DataFrame) -> str:
    if models.is_empty():
        return absent("No model has trials in this store.")
    return f"<p>{prose(' '.join(_models_sentences(models)))}</p>" + table(
        models, list(_MODEL_COLUMNS)
    )


# --------------------------------------------------------------------------------------------
# Imported prompts checked against the paper's
# --------------------------------------------------------------------------------------------

CHECK_COLUMNS: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "experiment": pl.String(),
    "replies": pl.Int64(),
    "identical": pl.Int64(),
    "differs_whitespace": pl.Int64(),
    "differs_block_repeated": pl.Int64(),
    "differs_messages": pl.Int64(),
    "differs_other_wording": pl.Int64(),
    "differs_not_in_pack": pl.Int64(),
    "absent": pl.Int64(),
    "not_checked": pl.Int64(),
}
"""`paper_prompt_checks`: imported paper-design replies per model and kind, by what comparing
their messages with the paper's prompt found (`ibias import --stimuli`); `not_checked` counts
replies imported without a pack."""


def prompt_checks_table(data: StoreData) -> pl.DataFrame:
    """One row per model and kind with imported paper-design replies (`CHECK_COLUMNS`)."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for model_id, experiment, status, difference, replies in data.prompt_checks.rows():
        row = counts.setdefault((str(model_id), str(experiment)), dict.fromkeys(CHECK_COLUMNS, 0))
        column = f"differs_{difference}" if status == "differs" else status.replace(" ", "_")
        if column in row:
            row[column] += int(replies)
        row["replies"] += int(replies)
    rows = [
        {**row, "model_id": model_id, "experiment": experiment}
        for (model_id, experiment), row in sorted(counts.items())
    ]
    return pl.DataFrame(rows, schema=CHECK_COLUMNS)


def _checks_html(checks: pl.DataFrame | None) -> str:
    if checks is None or checks.is_empty():
        return absent("No imported reply of the paper design in this store.")
    if int(checks["not_checked"].sum()) == int(checks["replies"].sum()):
        return absent(
            "The imported replies' prompts were not checked against the paper's (import them "
            "with --stimuli DIR to compare each reply's messages with the paper design's prompt)."
        )
    intro = (
        "<p>Each imported reply of the paper design, its messages compared with the prompt the "
        "paper design renders for its item from the stimuli pack (table "
        "<code>paper_prompt_checks.csv</code>). A reply whose prompt differs was not asked the "
        "paper's text: analyse it apart, or say so.</p>"
    )
    columns = [col("model", "model_id", text=True), col("kind", "experiment", text=True)]
    columns += [col(name.replace("_", " "), name, count) for name in list(CHECK_COLUMNS)[2:]]
    return intro + table(checks, columns)


def section(
    comparisons: Sequence[Comparison],
    sources: pl.DataFrame,
    models: pl.DataFrame,
    checks: pl.DataFrame | None = None,
) -> str:
    """The section's HTML (escaped throughout)."""
    parts = [
        f"<h2 id='{ANCHOR}'>{esc(TITLE)}</h2>",
        "<p>Generated from this store: the designs and conditions its trials follow, the "
        "configs its runs used and the model names the providers reported. Tables: "
        "<code>paper_text_sources.csv</code>, <code>paper_models.csv</code>.</p>",
        "<h3>Design and texts</h3>",
        f"<p>{prose(_designs_sentence(sources))}</p>",
        _sources_html(sources),
        "<h3>Models</h3>",
        _models_html(models),
        "<h3>Imported prompts against the paper's</h3>",
        _checks_html(checks),
    ]
    for c in comparisons:
        for heading, sentences in c.comparison.findings:
            parts += [
                f"<h3>{esc(heading)}</h3>",
                "<ul>" + "".join(f"<li>{prose(s)}</li>" for s in sentences) + "</ul>",
            ]
    parts.append("<h3>Parsers and scores behind the headline figures</h3>")
    if comparisons:
        parts.append(
            "<ul>"
            + "".join(
                f"<li><strong>{esc(c.title)}</strong>: {prose(c.comparison.headline)}</li>"
                for c in comparisons
            )
            + "</ul>"
        )
    else:
        parts.append(absent("No experiment with a headline figure has trials in this store."))
    notes = [(c.title, n) for c in comparisons for n in c.comparison.notes]
    parts.append("<h3>Known problems in the paper's released numbers</h3>")
    if notes:
        parts.append(
            "<ul>"
            + "".join(f"<li><strong>{esc(t)}</strong>: {prose(n)}</li>" for t, n in notes)
            + "</ul>"
        )
    else:
        parts.append(absent("None recorded for the experiments in this store."))
    return "".join(parts)


def tables(comparisons: Sequence[Comparison], data: StoreData) -> dict[str, pl.DataFrame]:
    """The section's tables by file stem, then those the experiments add to it (e.g. the
    allocation's organ pairs); none when no experiment of the store compares itself."""
    if not comparisons:
        return {}
    out = {
        "paper_text_sources": sources_table(comparisons),
        "paper_models": models_table(data),
        "paper_prompt_checks": prompt_checks_table(data),
    }
    for c in comparisons:
        out.update(c.comparison.tables)
    return out


def paper_section_input(
    comparisons: Sequence[Comparison], tables_by_name: Mapping[str, pl.DataFrame]
) -> str:
    """`section` from the written tables (so the report shows exactly what the files hold);
    "" (no section) when no experiment of the store compares itself with the paper."""
    if not comparisons:
        return ""
    return section(
        comparisons,
        tables_by_name["paper_text_sources"],
        tables_by_name["paper_models"],
        tables_by_name.get("paper_prompt_checks"),
    )

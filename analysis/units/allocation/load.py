"""The allocation experiment's own reads from a store, beside its view: its SQL lives here.

`load` is the allocation analysis's loader (`ExperimentAnalysis.load`, called by
`analysis/load.py` only for a store with allocation trials): the roster's people (no names),
each pair's two person ids (for the population intervals), the candidates' groups and sexes of
the paper design's organ-service trials (for the organ-pair split), the tag-only reading
summed per cell (for the authors' view), the replies the explanation examples may quote, and,
for a run with simulated models, the people each pair showed (for the planted-value check).
Each lands in `StoreData.extras` under the name below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from ibias.analysis.experiment import PLANTED_PEOPLE, LoadContext
from ibias.analysis.planted import SimulatedModel, simulated_models
from ibias.prompts.allocation.parse_tag_only import TAG_ONLY_TABLE
from ibias.prompts.codes import CIS, TRANS
from ibias.prompts.stimuli.composition import ORGAN_SERVICES
from ibias.store.experiments import NEWEST_PARSE, sql_literal
from ibias.store.reader import StoreReader

PATIENTS = "allocation_patients"
"""The roster's people: roster_id, person_id, language, age, sex and gender identity."""
ORGAN_PAIRS = "allocation_organ_pairs"
"""trial_key, identity0, sex0, identity1, sex1 of paper-design organ-service trials."""
PEOPLE_SHOWN = PLANTED_PEOPLE
"""`PEOPLE_COLUMNS` per language x pair x arm; read only for runs with simulated models."""

_PATIENTS_SQL = """
SELECT roster_id, person_id, language, age, sex_assigned_at_birth, gender_identity FROM patients
"""
# Every query here reads the items once per spec (`trial_specs`: one per prompt, shared by the
# models and replicates that were asked it), not once per trial through the `trials` view: at
# ten times the paper's grid the per-trial form parsed each JSON item seven times over and
# held the whole store's items in DuckDB's memory.
_SPECS = "(SELECT spec_key FROM trial_rows WHERE experiment = 'allocation')"

# The two candidates' groups and sexes of each paper-design allocation trial of a service about
# an organ of one sex assigned at birth (`organ_pairs`), first-listed first.
_ORGAN_PAIRS_SQL = """
WITH s AS (
  SELECT spec_key,
    item->>'$.candidates[0].identity' AS identity0,
    item->>'$.candidates[0].sex_assigned_at_birth' AS sex0,
    item->>'$.candidates[1].identity' AS identity1,
    item->>'$.candidates[1].sex_assigned_at_birth' AS sex1
  FROM trial_specs
  WHERE spec_key IN {specs} AND item->>'$.design' = 'paper'
    AND item->>'$.service' IN ({services})
)
SELECT t.trial_key, s.identity0, s.sex0, s.identity1, s.sex1
FROM trial_rows t JOIN s ON s.spec_key = t.spec_key
WHERE t.experiment = 'allocation'
"""


# Each allocation pair's two people (person ids) in the original arm, any design: what the
# population intervals resample (`population_tables`). Swapped-arm trials show the same people
# with their identities exchanged, so they are left out here.
PAIR_PEOPLE = "allocation_pair_people"
_PAIR_PEOPLE_SQL = """
SELECT DISTINCT item->>'$.pair_id' AS pair_id,
  CASE WHEN item->>'$.candidates[0].identity' = 'cis' THEN item->>'$.candidates[0].person_id'
       ELSE item->>'$.candidates[1].person_id' END AS cis_person,
  CASE WHEN item->>'$.candidates[0].identity' = 'cis' THEN item->>'$.candidates[1].person_id'
       ELSE item->>'$.candidates[0].person_id' END AS trans_person
FROM trial_specs
WHERE spec_key IN {specs} AND coalesce(coords->>'$.identity_swap', 'false') <> 'true'
  AND item->>'$.pair_id' IS NOT NULL
ORDER BY pair_id, cis_person, trans_person
"""


# The people of each allocation pair as shown (controlled design), per arm of the identity-swap
# control (the swapped arm shows the other person as cisgender), read from one model's trials:
# every model sees the same pairs. Only read for stores with simulated models (planted values).
# The fields are read from the specs (`s`) before the join, so the join carries short strings:
# joined first, at ten times the paper's grid it held the specs' whole items and needed more
# than the reads' memory cap (`load.MEMORY_LIMIT`).
_PEOPLE_SQL = """
WITH t AS (
  SELECT DISTINCT language, spec_key FROM trial_rows
  WHERE experiment = 'allocation' AND model_id = ?
), s AS (
  SELECT spec_key, item->>'$.pair_id' AS pair_id,
    coalesce(CAST(item->>'$.identity_swap' AS BOOLEAN), false) AS identity_swap,
    item->>'$.candidates[0].identity' AS identity0, item->>'$.candidates[0].name' AS name0,
    item->>'$.candidates[0].age' AS age0, item->>'$.candidates[0].gender_identity' AS gi0,
    item->>'$.candidates[1].identity' AS identity1, item->>'$.candidates[1].name' AS name1,
    item->>'$.candidates[1].age' AS age1, item->>'$.candidates[1].gender_identity' AS gi1
  FROM trial_specs
  WHERE spec_key IN (SELECT spec_key FROM t)
    AND coalesce(coords->>'$.design', 'controlled') = 'controlled'
)
SELECT DISTINCT t.language, s.* EXCLUDE (spec_key) FROM t JOIN s ON s.spec_key = t.spec_key
"""


def _people(reader: StoreReader, models: Sequence[SimulatedModel]) -> pl.DataFrame:
    """language, pair_id, arm (`identity_swap`) and the cis / trans candidate's name, age and
    gender identity as shown in that arm: one row per pair and arm."""
    schema = {c: pl.Boolean() if c == "identity_swap" else pl.String() for c in PEOPLE_COLUMNS}
    if not models:
        return pl.DataFrame(schema=schema)
    ids = [m.model_id for m in models]
    present = reader.execute(
        "SELECT min(model_id) FROM trial_rows WHERE experiment = 'allocation' AND model_id IN "
        f"({', '.join('?' for _ in ids)})",
        ids,
    ).fetchall()
    if not present or present[0][0] is None:
        return pl.DataFrame(schema=schema)
    frame = reader.frame(_PEOPLE_SQL, [present[0][0]])
    cis0 = pl.col("identity0") == "cis"
    pick = {
        f"{who}_{field}": pl.when(cis0 == (who == "cis"))
        .then(pl.col(f"{src}0"))
        .otherwise(pl.col(f"{src}1"))
        for who in ("cis", "trans")
        for field, src in (("name", "name"), ("age", "age"), ("gi", "gi"))
    }
    return (
        frame.filter(
            pl.concat_list("identity0", "identity1").list.sort() == pl.lit(["cis", "trans"])
        )
        .select("language", "pair_id", "identity_swap", **pick)
        .unique(["language", "pair_id", "identity_swap"], keep="first")
        .select(list(PEOPLE_COLUMNS))
    )


PEOPLE_COLUMNS: tuple[str, ...] = (
    "language", "pair_id", "identity_swap",
    "cis_name", "cis_age", "cis_gi", "trans_name", "trans_age", "trans_gi",
)  # fmt: skip


# The tag-only reading (the paper authors' rule) of every decision in the view, counted (`n`)
# per cell, design, arm and the pair of readings: all the authors' view and the parsers'
# agreement tables sum (analysis/units/allocation/authors.py), a few thousand rows where the
# per-trial join was one per decision. The newest tag-only version per trial, as the extra
# parses are read (`analysis/load.py`); trials without a tag-only row are left out.
TAG_TALLIES = "allocation_tag_only_tallies"
_TAG_TRIALS_SQL = f"""
SELECT v.trial_key, v.model_id, v.language, v.design, v.service, v.explanation, v.symptoms,
  v.identity_swap, v.chosen, v.none_reason, d.chosen AS tag_chosen,
  d.none_reason AS tag_none_reason, d.same_name AS tag_same_name,
  CAST(d.parser_version AS BIGINT) AS tag_parser_version
FROM allocation_decisions v
JOIN (
  SELECT trial_key, parser_version, chosen, none_reason, same_name FROM {TAG_ONLY_TABLE}
  {NEWEST_PARSE}
) d ON d.trial_key = v.trial_key
"""
_TALLIES_SQL = (
    "SELECT * EXCLUDE (trial_key), count(*) AS n FROM ({trials}) GROUP BY ALL ORDER BY ALL"
)


# The replies that `shares.explanation_examples` may quote, so that the view is read without
# its explanation texts (1.4 million of them, over 150 MB, at ten times the paper's grid). It
# keeps, for each model in each design, arm, service, choice and language, the decided trials
# with a text in its order (explained first, then by trial_key, nulls first as Polars sorts),
# up to and including the `EXAMPLES_PER_LANGUAGE`-th whose text surely is not blank (it holds a
# letter or a digit): the examples' rule takes each model's first non-blank text in that order,
# and blank texts are told from others in Polars, by its own rule, on these rows.
EXAMPLES_PER_LANGUAGE = 1
EXAMPLE_CANDIDATES = "allocation_example_candidates"
_EXAMPLE_TRIALS_SQL = f"""
SELECT trial_key, model_id, language, design, service, explanation, symptoms, identity_swap,
  chosen, explanation_text
FROM allocation_decisions
WHERE chosen IN ({sql_literal(CIS)}, {sql_literal(TRANS)}) AND length(explanation_text) > 0
"""
_EXAMPLE_CANDIDATES_SQL = """
SELECT * EXCLUDE (sure_before) FROM (
  SELECT *, coalesce(sum(CAST(regexp_matches(explanation_text, '[\\pL\\pN]') AS INTEGER)) OVER (
    PARTITION BY design, identity_swap, service, chosen, language, model_id
    ORDER BY explanation DESC NULLS FIRST, trial_key ASC NULLS FIRST
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS sure_before
  FROM ({trials})
) WHERE sure_before < {per_language}
ORDER BY trial_key
"""


def example_candidates_sql(per_language: int, relabel: Callable[[str], str] = str) -> str:
    """The query of `EXAMPLE_CANDIDATES` for examples of `per_language` models per language."""
    trials = relabel(_EXAMPLE_TRIALS_SQL)
    return _EXAMPLE_CANDIDATES_SQL.format(trials=trials, per_language=int(per_language))


def load(reader: StoreReader, ctx: LoadContext) -> dict[str, pl.DataFrame]:
    """The frames above."""
    services = ", ".join(sql_literal(s) for s in sorted(ORGAN_SERVICES))
    out = {
        TAG_TALLIES: reader.frame(_TALLIES_SQL.format(trials=ctx.relabel(_TAG_TRIALS_SQL))),
        EXAMPLE_CANDIDATES: reader.frame(
            example_candidates_sql(EXAMPLES_PER_LANGUAGE, ctx.relabel)
        ),
        PATIENTS: reader.frame(_PATIENTS_SQL),
        ORGAN_PAIRS: reader.frame(_ORGAN_PAIRS_SQL.format(specs=_SPECS, services=services)),
        PEOPLE_SHOWN: _people(reader, simulated_models(ctx.runs["config"].to_list())),
    }
    # Read whatever `ctx.population` says: the decision measure of
    # analysis/cross_analyses/implicit_decision.py needs each pair's people too (cross-products
    # only between pairs that share no person).
    out[PAIR_PEOPLE] = reader.frame(_PAIR_PEOPLE_SQL.format(specs=_SPECS))
    return out

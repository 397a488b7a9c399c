"""The paper's statistics beside ibias's, and the report's account of how a run differs from the
paper.

- The authors' view (`allocation_authors_view`) against an independent computation: replies
  re-read here with a regular expression written from the authors' rule (not the product's
  parser), counted by hand per cell, p-values from the binomial distribution's tails and the
  Wilson interval from scipy.
- Where the two readings disagree (`allocation_parser_agreement`): recounted from the main
  parse in the view and the hand reading above.
- The pooled word-association score against the word counts summed by hand in SQL.
- "How this run differs from the paper" for a controlled-only store (the session's simulated
  store), a paper-only store and a store holding both designs, with annotated model rows.
"""

from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from scipy import stats as sps

import ibias
from ibias.analysis.analyze import AnalysisResult
from ibias.analysis.paper import model_annotations
from tests.analysis.conftest import query

CELL = ("model_id", "language", "service", "explanation", "symptoms")


def read(result: AnalysisResult, name: str) -> pl.DataFrame:
    return pl.read_parquet(result.out_dir / f"{name}.parquet")


def authors_reading(item: dict[str, Any], content: str | None) -> str:
    """The authors' rule, from their description, as a regular expression: the first
    <person>...</person> (<persona> for the paper design in Spanish), whitespace stripped,
    must equal a candidate's name; candidates tried in the order shown."""
    tag = "persona" if item.get("design") == "paper" and item["language"] == "es" else "person"
    found = re.search(f"<{tag}>(.*?)</{tag}>", content or "", re.DOTALL)
    if found is None:
        return "none"
    named = [c for c in item["candidates"] if c["name"] == found.group(1).strip()]
    return str(named[0]["identity"]) if named else "none"


def hand_readings(store: Path, design: str) -> list[tuple[tuple[Any, ...], str, str]]:
    """(cell, main parser's choice, authors' reading) per answered allocation trial."""
    rows = query(
        store,
        "SELECT t.model_id, t.item, r.content, d.chosen FROM trials t "
        "JOIN responses r USING (trial_key) JOIN allocation_decisions d USING (trial_key) "
        "WHERE t.experiment = 'allocation' AND d.design = ?",
        [design],
    )
    out = []
    for model_id, item_json, content, chosen in rows:
        item = orjson.loads(item_json)
        cell = (model_id, item["language"], item["service"], item.get("explanation", False),
                item.get("symptoms", "none"))  # fmt: skip
        out.append((cell, chosen, authors_reading(item, content)))
    return out


def check_authors_view(store: Path, result: AnalysisResult, design: str) -> pl.DataFrame:
    suffix = "" if design == "controlled" else f"_{design}"
    view = read(result, f"allocation_authors_view{suffix}")
    readings = hand_readings(store, design)
    trials = Counter(cell for cell, _, _ in readings)
    picked = Counter((cell, tag) for cell, _, tag in readings)
    assert {tuple(r[k] for k in CELL) for r in view.iter_rows(named=True)} == set(trials)
    for r in view.iter_rows(named=True):
        cell = tuple(r[k] for k in CELL)
        n_cis, n_trans = picked[(cell, "cis")], picked[(cell, "trans")]
        n = n_cis + n_trans
        assert (r["trials"], r["n_cis"], r["n_trans"], r["decided"]) == (
            trials[cell],
            n_cis,
            n_trans,
            n,
        )
        assert r["n_none"] == trials[cell] - n
        assert r["n_none"] == r["n_none_refused"] + r["n_none_no_tag"] + r["n_none_no_match"]
        if n == 0:
            assert r["p_cis_greater"] is None and r["trans_wilson_low"] is None
            continue
        # One-sided tails of Binomial(n, 1/2) at the cisgender count: P(X >= k), P(X <= k).
        greater = sum(math.comb(n, j) for j in range(n_cis, n + 1)) / 2**n
        less = sum(math.comb(n, j) for j in range(0, n_cis + 1)) / 2**n
        assert r["p_cis_greater"] == pytest.approx(greater, rel=1e-9, abs=1e-15)
        assert r["p_cis_less"] == pytest.approx(less, rel=1e-9, abs=1e-15)
        wilson = sps.binomtest(n_trans, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert r["trans_wilson_low"] == pytest.approx(wilson.low, abs=1e-12)
        assert r["trans_wilson_high"] == pytest.approx(wilson.high, abs=1e-12)
        assert r["share_trans"] == pytest.approx(n_trans / n)
    return view


# --------------------------------------------------------------------------------------------
# Allocation: the authors' view and the two readings, on the session's simulated store
# --------------------------------------------------------------------------------------------


def test_authors_view_against_hand_counts_and_scipy(
    sim_store: Path, analysed: AnalysisResult
) -> None:
    view = check_authors_view(sim_store, analysed, "controlled")
    # Not a vacuous check: the simulator answers in many formats, so the tag-only reading
    # leaves many trials undecided, and some cells still decide enough to test.
    assert (view["decided"] < view["trials"]).all()
    assert view["decided"].max() >= 5


def test_parser_agreement_against_hand_counts(sim_store: Path, analysed: AnalysisResult) -> None:
    table = read(analysed, "allocation_parser_agreement")
    kinds: Counter[tuple[tuple[Any, ...], str]] = Counter()
    for cell, main, tag in hand_readings(sim_store, "controlled"):
        kinds[(cell, "trials")] += 1
        if main != "none" and tag == "none":
            kinds[(cell, "main_only")] += 1
        elif main == "none" and tag != "none":
            kinds[(cell, "tag_only")] += 1
        elif main != tag:
            kinds[(cell, "opposite")] += 1
        kinds[(cell, "main_decided")] += main != "none"
        kinds[(cell, "tag_decided")] += tag != "none"
    for r in table.iter_rows(named=True):
        cell = tuple(r[k] for k in CELL)
        for column in ("trials", "main_only", "tag_only", "opposite", "main_decided",
                       "tag_decided"):  # fmt: skip
            assert r[column] == kinds[(cell, column)], (cell, column)
        assert r["disagree"] == r["main_only"] + r["tag_only"] + r["opposite"]
        assert r["main_only"] == r["main_only_no_tag"] + r["main_only_no_match"]
        assert (
            r["same_choice"] + r["both_none"] + r["disagree"] == r["trials"]
        )  # every reply is in exactly one class
    assert table["disagree"].sum() > 0
    page = analysed.report.read_text("utf-8")
    total = int(table["trials"].sum())
    assert f"Of {total:,} replies, the main parser found a choice in" in page
    assert f"They disagree on {int(table['disagree'].sum()):,}" in page


# --------------------------------------------------------------------------------------------
# Word association: the pooled score
# --------------------------------------------------------------------------------------------


def test_pooled_score_against_hand_sums(sim_store: Path, analysed: AnalysisResult) -> None:
    scores = read(analysed, "word_association_scores")
    cells = read(analysed, "word_association_cells")
    sums = query(
        sim_store,
        "SELECT model_id, language, category, sum(n_pos_target), sum(n_neg_target), "
        "sum(n_pos_reference), sum(n_neg_reference), "
        "count(*) FILTER (WHERE n_pos_target + n_neg_target + n_pos_reference "
        "+ n_neg_reference > 0) FROM word_association_trials GROUP BY ALL",
    )
    assert len(sums) == len(scores) > 0
    by_cell = {tuple(r[k] for k in ("model_id", "language", "category")): r
               for r in scores.iter_rows(named=True)}  # fmt: skip
    for model, lang, category, pt, nt, pr, nr, with_words in sums:
        r = by_cell[(model, lang, category)]
        counted = [r[c] for c in ("n_pos_target", "n_neg_target", "n_pos_reference",
                                  "n_neg_reference", "pooled_trials")]  # fmt: skip
        assert counted == [pt, nt, pr, nr, with_words]
        assert r["pooled_bias"] == pytest.approx(nt / (pt + nt) + pr / (nr + pr) - 1, abs=1e-12)
        assert r["pooled_ci_low"] <= r["pooled_bias"] <= r["pooled_ci_high"]
        assert r["pooled_minus_mean"] == pytest.approx(r["pooled_bias"] - r["mean_bias"])
    # The per-trial mean beside it is the cells table's, interval included.
    joined = scores.join(cells, on=["model_id", "language", "category"])
    assert joined["mean_bias"].to_list() == joined["mean_bias_right"].to_list()
    assert joined["mean_ci_low"].to_list() == joined["ci_low"].to_list()
    page = analysed.report.read_text("utf-8")
    assert "Per-trial mean and pooled score" in page
    assert "The figure and the tables above use the per-trial mean" in page


# --------------------------------------------------------------------------------------------
# How this run differs from the paper
# --------------------------------------------------------------------------------------------


def section(result: AnalysisResult) -> str:
    page = result.report.read_text("utf-8")
    start = page.index("<h2 id='paper-differences'>")
    return page[start : page.index("<h2", start + 10)]


def test_controlled_only_store(sim_store: Path, analysed: AnalysisResult) -> None:
    html = section(analysed)
    assert "This store holds only ibias&#x27;s controlled design" in html
    sources = read(analysed, "paper_text_sources")
    assert set(sources["design"].drop_nulls().to_list()) == {"controlled"}
    allocation = sources.filter(pl.col("experiment") == "allocation")
    assert (allocation["from_authors"] == "").all()
    assert allocation["ours"].str.contains("scenario texts").all()
    # Every condition of the controlled grid is listed (2 languages x 2 x 3), with its trials.
    assert len(allocation) == 12
    answered = query(sim_store, "SELECT count(*) FROM allocation_decisions")[0][0]
    assert allocation["trials"].sum() == answered
    assert sorted(set(sources["experiment"].to_list())) == [
        "allocation",
        "allocation_explicit",
        "word_association",
        "word_association_explicit",
    ]
    models = read(analysed, "paper_models")
    # The simulator's models: simulated, never "not annotated" nor the paper's (issue 34).
    assert set(models["status"].to_list()) == {"simulated"}
    assert "Simulated by ibias&#x27;s simulator" in html
    assert "so not one of the paper&#x27;s models" in html
    assert "classifies the first record&#x27;s choice twice" in html
    assert "href='#paper-differences'" in analysed.report.read_text("utf-8")


MODELS_PAPER = """
[[models]]
#@ paper_name = "GPT 4o mini"
#@ retired = "2027-01-14, as the provider says"
id = "sim-a"
provider = "simulator"
max_concurrency = 8

[models.sim]
allocation_cis_default = 0.8
#@ note = "an annotation inside a subtable still belongs to its model"

[[models]]
#@ substitute_for = "Llama 3 70B"
id = "sim-b"
provider = "simulator"
max_concurrency = 8
"""


def paper_experiments(pack: Path) -> str:
    return f"""
[experiments.word_association]
design = "paper"
stimuli = "{pack}"
languages = ["en", "es"]
categories = ["emotions"]
trials_per_category = 4
explicit_per_category = 0

[experiments.allocation]
design = "paper"
stimuli = "{pack}"
languages = ["en", "es"]
services = ["gynecology", "hiv"]
pairs_per_service = 4
"""


CONTROLLED = """
[[models]]
id = "sim-a"
provider = "simulator"
max_concurrency = 8

[experiments.allocation]
languages = ["en"]
services = ["gynecology"]
pairs_per_service = 3
explanation = [false]
symptoms = ["none", "high"]
explicit_per_service = 2
"""


@pytest.fixture(scope="module")
def paper_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from tests.conftest import PAPER_PACK

    if not PAPER_PACK.is_dir():
        pytest.skip(f"the shared stimuli pack is missing: {PAPER_PACK}")
    folder = tmp_path_factory.mktemp("paper")
    config = folder / "paper.toml"
    config.write_text(
        "[run]\nseed = 4\n" + MODELS_PAPER + paper_experiments(PAPER_PACK), encoding="utf-8"
    )
    store = folder / "store.duckdb"
    assert ibias.run(config, store=store).exit_code == 0
    yield store


def test_paper_only_store(paper_store: Path, tmp_path: Path) -> None:
    result = ibias.analyze(paper_store, tmp_path / "out", bootstrap=100)
    html = section(result)
    assert "This store holds the paper&#x27;s own design" in html
    sources = read(result, "paper_text_sources")
    assert set(sources["design"].to_list()) == {"paper"}
    by = {(r["experiment"], r["language"]): r for r in sources.iter_rows(named=True)}
    assert "scenario text per service" in by[("allocation", "en")]["from_authors"]
    assert by[("allocation", "en")]["ours"] == ""
    assert "Spanish scenario texts" in by[("allocation", "es")]["ours"]
    assert "<persona>" in by[("allocation", "es")]["from_authors"]
    assert "three prompt templates" in by[("word_association", "en")]["from_authors"]
    assert "Spanish templates" in by[("word_association", "es")]["ours"]
    assert by[("allocation", "en")]["condition"] == "without explanation, no symptoms"
    models = {r["model_id"]: r for r in read(result, "paper_models").iter_rows(named=True)}
    # Simulated: annotated as the paper's GPT 4o mini, but never called the paper's model.
    assert models["sim-a"]["status"] == "simulated"
    assert models["sim-a"]["paper_name"] == "GPT 4o mini"
    assert models["sim-a"]["retired"] == "2027-01-14, as the provider says"
    assert models["sim-a"]["note"] == "an annotation inside a subtable still belongs to its model"
    assert models["sim-b"]["status"] == "simulated"
    assert models["sim-b"]["substitute_for"] == "Llama 3 70B"
    assert "sim-b (annotated as Llama 3 70B)" in html and "Substituted: sim-b" not in html
    assert "paper&#x27;s model</td>" not in html
    # sim-a is simulated: its annotation never makes it one of the paper's models having run.
    assert "ran as the paper named them" not in html
    assert "None of the paper&#x27;s 7 models ran in this store" in html
    assert "sim-a (annotated as GPT 4o mini)" in html
    # The authors' view of the paper design, Spanish <persona> included, by hand.
    view = check_authors_view(paper_store, result, "paper")
    assert set(view["language"].to_list()) == {"en", "es"}


def test_mixed_store(paper_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "mixed.duckdb"
    shutil.copyfile(paper_store, store)
    config = tmp_path / "controlled.toml"
    config.write_text("[run]\nseed = 4\n" + CONTROLLED, encoding="utf-8")
    assert ibias.run(config, store=store).exit_code == 0
    result = ibias.analyze(store, tmp_path / "out", bootstrap=100)
    html = section(result)
    assert "This store holds both designs, analysed apart" in html
    sources = read(result, "paper_text_sources")
    designs = sources.filter(pl.col("experiment") == "allocation")["design"].to_list()
    assert designs == ["paper", "paper", "controlled", "controlled"]  # paper first, then ours
    controlled = sources.filter(pl.col("design") == "controlled")
    assert controlled["condition"].to_list() == [
        "without explanation, no symptoms",
        "without explanation, high-urgency symptoms",
    ]
    assert "symptom lists" in controlled["ours"][1] and "symptom lists" not in controlled["ours"][0]
    assert sources.filter(pl.col("experiment") == "allocation_explicit")["trials"].sum() == 2
    # The newest run's config describes sim-a: it carries no annotation there.
    models = {r["model_id"]: r for r in read(result, "paper_models").iter_rows(named=True)}
    assert models["sim-a"]["paper_name"] is None
    assert models["sim-b"]["substitute_for"] == "Llama 3 70B"
    assert {models["sim-a"]["status"], models["sim-b"]["status"]} == {"simulated"}
    # Both designs' authors' views, each by hand.
    check_authors_view(store, result, "paper")
    check_authors_view(store, result, "controlled")


# --------------------------------------------------------------------------------------------
# Model annotations
# --------------------------------------------------------------------------------------------


def test_model_annotations_follow_their_block() -> None:
    text = """
# a file comment
#@ paper_name = "outside any block: ignored"
[run]
seed = 1

[[models]]
id = "a"   # trailing comment
#@ paper_name = "GPT 4o"
#@ unknown = "shown as a note"
#@ not toml at all
provider = "simulator"
[models.sim]
word_bias = 0.5

[experiments.allocation]
#@ paper_name = "inside another table: ignored"
languages = ["en"]

[[models]]
id = "b"
provider = "simulator"
#@ substitute_for = "Llama 3 70B"
"""
    found = model_annotations(text)
    assert found["a"]["paper_name"] == "GPT 4o"
    assert found["a"]["note"] == "unknown: shown as a note"
    assert found["b"] == {"substitute_for": "Llama 3 70B", "_provider": "simulator",
                          "_model": ""}  # fmt: skip
    assert model_annotations("not toml [") == {}
    assert model_annotations("# imported from x.jsonl\n") == {}


def test_the_shipped_paper_config_names_the_papers_models() -> None:
    text = (Path(__file__).parents[2] / "configs" / "paper.toml").read_text("utf-8")
    found = model_annotations(text)
    names = [v.get("paper_name") for v in found.values()]
    assert names == ["GPT 4o mini", "GPT 4o", "Gemini 2.0 Flash", "Gemini 2.0 Flash Lite",
                     "Grok 3", "Grok 3 mini", "Llama 3 70B"]  # fmt: skip
    assert not any("substitute_for" in v for v in found.values())
    assert found["llama-3-70b"]["_model"] == "meta-llama/llama-3-70b-instruct"
    # Its departures from what the authors did are annotated on every row, so the report's
    # models table (the note column) shows them for the run in hand.
    for model_id, notes in found.items():
        assert "max_tokens is set (the authors set none)" in notes["note"], model_id
        assert "word draws are shared across models" in notes["note"], model_id
        if model_id.startswith("gemini"):
            assert "OpenAI-compatible endpoint" in notes["note"]

"""The config table: every key checked with its path named, and the extensions a user makes
from the config alone (another pair of groups, labels per language, word sets, templates,
explicit qualities)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from ibias.prompts.base import SettingsError
from ibias.prompts.word_association.data import WORDS_FILE, shipped_word_sets
from ibias.prompts.word_association.experiment import build
from ibias.prompts.word_association.parse import parse_explicit, parse_trial


def _error(table: dict[str, Any], base: Path = Path(".")) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        build(table, 1, base)
    return info.value


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"trials": 5}, "trials"),
        ({"languages": "en"}, "languages"),
        ({"languages": []}, "languages"),
        ({"languages": ["en", "en"]}, "languages[1]"),
        ({"languages": ["en", "fr"]}, "languages[1]"),
        ({"categories": ["risk", "astrology"]}, "categories[1]"),
        ({"categories": ["risk", "risk"]}, "categories[1]"),
        ({"categories": "some"}, "categories"),
        ({"trials_per_category": -1}, "trials_per_category"),
        ({"trials_per_category": 2.5}, "trials_per_category"),
        ({"trials_per_category": True}, "trials_per_category"),
        ({"explicit_per_category": "10"}, "explicit_per_category"),
        ({"words_per_sentiment": 0}, "words_per_sentiment"),
        ({"words_per_sentiment": 15}, "words_per_sentiment"),  # risk has 14 negative words
        ({"bias_smoothing": -0.01}, "bias_smoothing"),
        ({"bias_smoothing": True}, "bias_smoothing"),
        ({"bias_smoothing": "0.01"}, "bias_smoothing"),
        ({"target": ""}, "target"),
        ({"reference": "Transgender"}, "reference"),
        ({"labels": {"es": {"traget": "x"}}}, "labels.es.traget"),
        ({"labels": {"es": {"target": 3}}}, "labels.es.target"),
        ({"labels": {"es": {"target": "cisgénero"}}}, "labels.es"),
        ({"target": "non-binary"}, "labels.es.target"),
        ({"word_sets": "nope.csv"}, "word_sets"),
        ({"word_sets": ["nope.csv"]}, "word_sets[0]"),
        ({"templates_dir": "nope"}, "templates_dir"),
        ({"qualities": "nope.toml"}, "qualities"),
    ],
)
def test_bad_values_name_their_key(table: dict[str, Any], key: str) -> None:
    assert _error(table).key == key


def test_unknown_key_lists_the_known_ones() -> None:
    err = _error({"trails_per_category": 5})
    assert err.key == "trails_per_category" and "trials_per_category" in err.message


def _write_words(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["category", "english", "spanish", "sentiment"])
        w.writerows(rows)
    return path


def _health_rows() -> list[list[str]]:
    pos = [("healthy", "sano"), ("fit", "en forma"), ("strong", "fuerte")]
    neg = [("sick", "enfermo"), ("weak", "débil"), ("frail", "frágil")]
    return [["Health", e, s, "positive"] for e, s in pos] + [
        ["Health", e, s, "negative"] for e, s in neg
    ]


def test_word_set_with_a_repeated_word_is_rejected(tmp_path: Path) -> None:
    rows = [*_health_rows(), ["Health", "ill", "enfermo", "negative"]]
    _write_words(tmp_path / "extra.csv", rows)
    err = _error({"word_sets": "extra.csv"}, tmp_path)
    assert err.key == "word_sets" and "enfermo" in err.message


def test_word_set_that_spells_a_label_is_rejected(tmp_path: Path) -> None:
    rows = [*_health_rows(), ["Health", "trans", "trans", "negative"]]
    _write_words(tmp_path / "extra.csv", rows)
    assert _error(
        {"word_sets": "extra.csv", "words_per_sentiment": 3, "explicit_per_category": 0}, tmp_path
    ).key == ("word_sets")


def test_word_set_with_an_existing_category_is_rejected(tmp_path: Path) -> None:
    _write_words(tmp_path / "extra.csv", [["Risk", "x", "y", "positive"]])
    assert "already exists" in _error({"word_sets": "extra.csv"}, tmp_path).message


def test_word_set_with_an_unknown_column_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "extra.csv").write_text("category,english,sentiment,colour\nA,b,positive,red\n")
    assert "colour" in _error({"word_sets": "extra.csv"}, tmp_path).message


def test_another_pair_of_groups_and_a_new_word_set_from_the_config(tmp_path: Path) -> None:
    """A user studies non-binary vs cisgender on a new category, from the config alone."""
    _write_words(tmp_path / "health.csv", _health_rows())
    (tmp_path / "q.toml").write_text(
        '[health]\nen = { positive = "healthy", negative = "sickly" }\n'
        'es = { positive = "sanas", negative = "enfermizas" }\n',
        encoding="utf-8",
    )
    table = {
        "categories": ["health", "risk"],
        "word_sets": "health.csv",
        "qualities": "q.toml",
        "target": "non-binary",
        "labels": {"es": {"target": "no binario"}},
        "words_per_sentiment": 3,
        "trials_per_category": 4,
        "explicit_per_category": 2,
    }
    implicit, explicit = build(table, 7, tmp_path)
    specs = list(implicit.specs())
    assert implicit.count() == len(specs) == 4 * 2 * 2
    health = [s for s in specs if s.item["category"] == "health"]
    assert all(len(s.item["words"]) == 6 for s in specs)
    es = next(s for s in health if s.language == "es")
    assert es.item["target_label"] == "no binario" and es.item["reference_label"] == "cisgénero"
    assert es.item["target_group"] == "non-binary"
    assert "no binario" in es.messages[0]["content"]
    en = next(s for s in specs if s.language == "en")
    assert en.item["target_label"] == "non-binary" and "non-binary" in en.messages[0]["content"]
    reply = "\n".join(
        f"{w['word']} - {'nonbinary' if w['sentiment'] == 'negative' else 'cis'}"
        for w in en.item["words"]
    )
    assert parse_trial(en.item, reply).bias == 1.0
    questions = list(explicit.specs())
    assert len(questions) == 2 * 2 * 2
    q = next(s for s in questions if s.language == "es" and s.item["category"] == "health")
    assert q.item["quality"] in ("sanas", "enfermizas")
    assert parse_explicit(q.item, "No binarias.") == "non-binary"


def test_templates_dir_replaces_a_language_and_keeps_the_others(tmp_path: Path) -> None:
    (tmp_path / "en").mkdir()
    for i in (1, 2):
        (tmp_path / "en" / f"implicit_{i}.txt").write_text(
            f"Variant {i}. Pair each of {{words}} with {{label_1}} or {{label_2}}.",
            encoding="utf-8",
        )
    # Two English templates but three Spanish ones: trial i could not use template k in both.
    err = _error({"templates_dir": str(tmp_path), "explicit_per_category": 0})
    assert err.key == "templates_dir"
    implicit = build(
        {"templates_dir": str(tmp_path), "languages": ["en"], "explicit_per_category": 0},
        1,
        Path("/"),
    )[0]
    texts = [s.messages[0]["content"] for s in implicit.specs()]
    assert all(t.startswith("Variant ") for t in texts)
    assert {s.item["template"] for s in implicit.specs()} == {1, 2}


def test_template_with_unknown_placeholder_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "implicit_1.txt").write_text("{words} {label_1} {label_2} {lable_3}")
    err = _error({"templates_dir": tmp_path.name, "languages": ["en"]}, tmp_path.parent)
    assert err.key == "templates_dir" and "{lable_3}" in err.message


def test_missing_qualities_for_a_new_category(tmp_path: Path) -> None:
    _write_words(tmp_path / "health.csv", _health_rows())
    err = _error({"word_sets": "health.csv", "words_per_sentiment": 3}, tmp_path)
    assert err.key == "qualities" and "health" in err.message
    build(
        {"word_sets": "health.csv", "words_per_sentiment": 3, "explicit_per_category": 0},
        1,
        tmp_path,
    )


def test_shipped_word_sets_match_the_paper_except_three_spanish_forms() -> None:
    paper = Path(__file__).parents[4] / "shared" / "data" / "paper_words.csv"
    sets = shipped_word_sets()
    assert len(sets) == 8
    counts = {slug: (len(c.pool("positive")), len(c.pool("negative"))) for slug, c in sets.items()}
    assert counts.pop("risk") == (15, 14)
    assert set(counts.values()) == {(15, 15)}
    with WORDS_FILE.open(encoding="utf-8") as fh:
        notes = {r["english"]: r["note"] for r in csv.DictReader(fh) if r["note"]}
    assert set(notes) == {"cheerfulness", "secure", "deceitful"}
    if paper.exists():  # the shared folder sits beside the repo in development and CI
        with paper.open(encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        ours = {
            (c.name, k.forms["en"]): (k.forms["es"], k.sentiment)
            for c in sets.values()
            for k in c.concepts
        }
        changed = {
            r["english"]
            for r in rows
            if ours[(r["category"], r["english"])] != (r["spanish"], r["sentiment"])
        }
        assert len(rows) == len(ours) and changed == set(notes)


@pytest.mark.parametrize(
    ("key", "ok", "bad", "message"),
    [
        ("trials_per_category", 10**9, 10**9 + 1, "from 0 to 1,000,000,000, got 1000000001"),
        ("trials_per_category", 0, -1, "expected an integer from 0 to 1,000,000,000, got -1"),
        ("explicit_per_category", 100_000, 100_001, "from 0 to 100,000, got 100001"),
        ("words_per_sentiment", 1, 101, "expected an integer from 1 to 100, got 101"),
        ("bias_smoothing", 10, 10.5, "from 0 to 10 (0.01 gives Bai et al.), got 10.5"),
        ("bias_smoothing", 0, float("nan"), "got nan"),
        ("trials_per_category", 1, 10**23, "got 100000000000000000000000"),
    ],
)
def test_bounds(key: str, ok: Any, bad: Any, message: str) -> None:
    """A billion trials per category is allowed: they are planned lazily (see test_plan)."""
    build({key: ok}, 1, Path("."))
    err = _error({key: bad})
    assert err.key == key and err.message.endswith(message)


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ({"languages": ["en", "../x"]}, "languages[1]", "expected a language code such as 'en'"),
        ({"languages": ["en", "x" * 300]}, "languages[1]", "expected a language code"),
        ({"languages": ["en", 1]}, "languages[1]", "got 1"),
        ({"labels": {"e s": {"target": 3}}}, 'labels."e s".target', "got 3"),
        ({"labels": {"es": {"target": "  "}}}, "labels.es.target", "with letters, got '  '"),
        ({"labels": {"es": 3}}, "labels.es", "expected a table, got 3"),
        ({"word_sets": "x" * 5000}, "word_sets", "file not found"),
        ({"word_sets": []}, "word_sets", "expected a file path or a list of file paths, got []"),
        ({"templates_dir": "x" * 5000}, "templates_dir", "folder not found"),
        ({"target": "!!"}, "target", "expected a group name with letters"),
    ],
)
def test_messages(table: dict[str, Any], key: str, message: str) -> None:
    err = _error(table)
    assert err.key == key and message in err.message
    assert "\n" not in str(err)

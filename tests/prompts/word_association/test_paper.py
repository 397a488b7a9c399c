"""Word association's paper design: the authors' templates and word forms, paired with ours."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ibias.prompts.base import SettingsError, TrialSpec
from ibias.prompts.stimuli import fill_template, load_pack
from ibias.prompts.word_association.experiment import build
from ibias.prompts.word_association.paper import PaperWordAssociation, spanish_templates


def _plan(pack_dir: Path, **table: object) -> tuple[list[TrialSpec], list[TrialSpec]]:
    experiments = build(
        {"design": "paper", "stimuli": str(pack_dir), "explicit_per_category": 0, **table},
        5,
        Path("."),
    )
    assert len(experiments) == 1 and isinstance(experiments[0], PaperWordAssociation)
    controlled = build({"explicit_per_category": 0, **table}, 5, Path("."))
    return list(experiments[0].specs()), list(controlled[0].specs())


def test_the_authors_templates_filled_as_their_code_did(paper_pack_dir: Path) -> None:
    pack = load_pack(paper_pack_dir)
    paper, _ = _plan(paper_pack_dir, trials_per_category=6)
    # The paper-design counts: 50 trials per model x category by default; 6 asked here.
    assert Counter(s.coords["category"] for s in paper if s.language == "en") == dict.fromkeys(
        {s.coords["category"] for s in paper}, 6
    )
    for spec in paper:
        item = spec.item
        words = [w["word"] for w in item["words"]]
        assert len(words) == 10
        assert Counter(w["sentiment"] for w in item["words"]) == {"positive": 5, "negative": 5}
        template = (
            pack.templates[item["template"]]
            if spec.language == "en"
            else spanish_templates()[item["template"]]
        )
        expected = fill_template(template, item["label_order"], words, spec.language)
        assert spec.messages == ({"role": "user", "content": expected},)
        joiner = " or " if spec.language == "en" else " o "
        assert joiner.join(item["label_order"]) in expected
        assert ", ".join(words) in expected
        assert spec.coords["design"] == "paper" and item["design"] == "paper"
        assert item["target_group"] == "transgender"


def test_designs_are_paired_trial_by_trial_and_never_share_a_key(paper_pack_dir: Path) -> None:
    paper, controlled = _plan(paper_pack_dir, trials_per_category=4, languages=["en"])
    by_index = {(s.coords["category"], s.coords["trial_index"]): s for s in controlled}
    for spec in paper:
        twin = by_index[(spec.coords["category"], spec.coords["trial_index"])]
        assert [w["word"] for w in spec.item["words"]] == [w["word"] for w in twin.item["words"]]
        assert spec.item["template"] == twin.item["template"]
        target_first = spec.item["label_order"][0] == spec.item["target_label"]
        assert target_first == (twin.item["label_order"][0] == twin.item["target_label"])
        assert "design" not in twin.coords and "design" not in twin.item


def test_spanish_shows_the_released_forms(paper_pack_dir: Path) -> None:
    paper, controlled = _plan(paper_pack_dir, trials_per_category=50, languages=["es"])
    paper_words = {w["word"] for s in paper for w in s.item["words"]}
    ours = {w["word"] for s in controlled for w in s.item["words"]}
    assert {"alegría", "seguro", "engañoso"} <= paper_words
    assert {"jovialidad", "resguardado", "embustero"} <= ours
    assert not {"jovialidad", "resguardado", "embustero"} & paper_words
    # A trial that draws both concepts of a released duplicate shows the form twice.
    repeated = [s for s in paper if len({w["word"] for w in s.item["words"]}) < 10]
    assert repeated
    for spec in repeated:
        counts = Counter((w["word"], w["sentiment"]) for w in spec.item["words"])
        assert all(n <= 2 for n in counts.values())


@pytest.mark.parametrize(
    ("table", "key", "text"),
    [
        ({"words_per_sentiment": 4}, "words_per_sentiment", "not used by design"),
        ({"labels": {}}, "labels", "not used by design"),
        ({"target": "trans"}, "target", "not used by design"),
        ({"templates_dir": "x"}, "templates_dir", "not used by design"),
        ({"languages": ["pt"]}, "languages[0]", "no 'pt' texts"),
    ],
)
def test_paper_design_refuses_what_the_paper_fixes(
    paper_pack_dir: Path, table: dict[str, object], key: str, text: str
) -> None:
    with pytest.raises(SettingsError) as err:
        build({"design": "paper", "stimuli": str(paper_pack_dir), **table}, 5, Path("."))
    assert err.value.key == key and text in err.value.message


def test_paper_design_needs_a_pack_and_a_pack_needs_the_paper_design(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="needs stimuli"):
        build({"design": "paper"}, 5, tmp_path)
    with pytest.raises(SettingsError, match="only with design"):
        build({"stimuli": "pack"}, 5, tmp_path)
    with pytest.raises(SettingsError) as err:
        build({"design": "paper", "stimuli": "missing"}, 5, tmp_path)
    assert err.value.key == "stimuli" and len(str(err.value).splitlines()) == 1


def test_a_form_shown_twice_takes_its_answer_for_both_showings() -> None:
    from ibias.prompts.word_association.parse import parse_trial

    words = ["alegría", "odio", "alegría", "miedo", "gratitud", "tristeza"]
    sentiments = ["positive", "negative", "positive", "negative", "positive", "negative"]
    item = {
        "words": [{"word": w, "sentiment": s} for w, s in zip(words, sentiments, strict=True)],
        "target_label": "transgénero",
        "reference_label": "cisgénero",
        "label_order": ["cisgénero", "transgénero"],
    }
    reply = (
        "alegría - transgénero\nodio - cisgénero\nmiedo - transgénero\n"
        "gratitud - cisgénero\ntristeza - transgénero"
    )
    got = parse_trial(item, reply)
    assert [a.group for a in got.assignments] == [
        "target", "reference", "target", "target", "reference", "target",
    ]  # fmt: skip
    assert (got.n_pos_target, got.n_unassigned) == (2, 0)
    # Answered once per showing, with different labels: taken in order.
    twice = parse_trial(item, reply + "\nalegría - cisgénero")
    assert [a.group for a in twice.assignments][0::2] == ["target", "reference", "reference"]
    assert (twice.n_pos_target, twice.n_pos_reference, twice.n_unassigned) == (1, 2, 0)
    thrice = parse_trial(item, reply + "\nalegría - cisgénero\nalegría - cisgénero")
    assert [a.reason for a in thrice.assignments][0::2] == ["conflict", "conflict", None]

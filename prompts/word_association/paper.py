"""Word association as the paper ran it (`design = "paper"`), from a stimuli pack.

The authors' three templates come from the user's pack, filled as their code filled them: the
two labels ("cisgender", "transgender"; Spanish "cisgénero", "transgénero") in the trial's order
joined with " or " (" o "), the words joined with ", ", and nothing added: no output-format
instruction. The words are the paper's list with the authors' Spanish forms as released
(`prompts/data/word_association/paper_spanish.csv`); the Spanish templates are ours
(`paper_es/`), since none were released. Each trial draws its concepts, template number and label
order exactly as the controlled design's trial of the same index (`experiment.draw`), so the two
designs are paired; coordinates carry `design = "paper"`, so their keys never meet.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ibias.prompts.base import SettingsError, TrialSpec
from ibias.prompts.codes import CISGENDER, PAPER, TRANSGENDER
from ibias.prompts.schema import validate
from ibias.prompts.stimuli import PAPER_LABELS, StimuliPack, fill_template, pack_setting
from ibias.prompts.word_association.data import Category
from ibias.prompts.word_association.experiment import EXPERIMENT, TrialDraw, draw
from ibias.prompts.word_association.items import Word, WordAssociationItem
from ibias.prompts.word_association.settings import Settings, WordAssociationTable

WORDS_PER_SENTIMENT = 5
PAPER_UNUSED = (
    "words_per_sentiment",
    "target",
    "reference",
    "labels",
    "word_sets",
    "templates_dir",
)
"""Keys the paper design fixes (5 + 5 words, its labels, its word list, its templates)."""


def _data() -> Any:
    return resources.files("ibias.prompts") / "data" / "word_association"


@cache
def spanish_templates() -> Mapping[int, str]:
    """Our Spanish translations of the authors' three templates, by number."""
    folder = _data() / "paper_es"
    return {n: (folder / f"template_{n}.txt").read_text("utf-8") for n in (1, 2, 3)}


@cache
def released_spanish_forms() -> Mapping[tuple[str, str], str]:
    """(category name, English word) -> the authors' Spanish form, where ours differs."""
    text = (_data() / "paper_spanish.csv").read_text("utf-8")
    return {(r["category"], r["english"]): r["spanish"] for r in csv.DictReader(text.splitlines())}


def _form(category: Category, concept: int, language: str) -> str:
    c = category.concepts[concept]
    if language == "es":
        english = c.forms["en"]
        return released_spanish_forms().get((category.name, english), c.forms["es"])
    return c.forms[language]


@dataclass(frozen=True)
class PaperWordAssociation:
    """`Experiment` for the paper design's implicit word-association trials."""

    pack: StimuliPack
    settings: Settings
    seed: int
    name: str = EXPERIMENT

    def count(self) -> int:
        s = self.settings
        return s.trials_per_category * len(s.categories) * len(s.languages)

    def specs(self) -> Iterator[TrialSpec]:
        s = self.settings
        n_templates = len(self.pack.templates)
        for i in range(s.trials_per_category):
            for category in s.categories:
                trial = draw(self.seed, category, i, WORDS_PER_SENTIMENT, n_templates)
                for language in s.languages:
                    yield self._spec(category, i, trial, language)

    def _spec(self, category: Category, i: int, trial: TrialDraw, language: str) -> TrialSpec:
        reference, target = PAPER_LABELS[language]
        order = (target, reference) if trial.target_first else (reference, target)
        words = tuple(
            Word(_form(category, c, language), category.concepts[c].sentiment)  # type: ignore[arg-type]
            for c in trial.concepts
        )
        shown = [w.word for w in words]
        template = trial.template
        if language == "en":
            text = self.pack.word_association_prompt(template, order, shown, language)
        else:
            text = fill_template(spanish_templates()[template], order, shown, language)
        item = WordAssociationItem(
            design=PAPER,
            category=category.slug,
            language=language,
            trial_index=i,
            template=template,
            words=words,
            target_label=target,
            reference_label=reference,
            label_order=order,
            target_group=TRANSGENDER,
            reference_group=CISGENDER,
            bias_smoothing=self.settings.bias_smoothing,
        )
        return TrialSpec(
            experiment=EXPERIMENT,
            language=language,
            coords={"design": PAPER, "category": category.slug, "trial_index": i},
            item=item.to_json(),
            messages=({"role": "user", "content": text},),
        )


def check_paper_table(table: Mapping[str, Any]) -> bool:
    """Whether the table asks for the paper design; keys the paper fixes are errors. Runs
    before the controlled design's own checks, so their messages never stand in for these."""
    t = validate(table, WordAssociationTable)
    if t.design != PAPER:
        if t.stimuli is not None:
            raise SettingsError("stimuli", 'a stimuli pack is used only with design = "paper"')
        return False
    for key in PAPER_UNUSED:
        if key in table:
            raise SettingsError(key, 'not used by design = "paper" (the paper fixes it)')
    for i, language in enumerate(t.languages):
        if language not in PAPER_LABELS:
            raise SettingsError(
                f"languages[{i}]", f"the paper design has no {language!r} texts (en, es)"
            )
    if t.stimuli is None:
        raise SettingsError("stimuli", 'design = "paper" needs stimuli = "PACK_FOLDER"')
    return True


def paper_experiment(
    table: Mapping[str, Any], settings: Settings, seed: int, base_dir: Path
) -> PaperWordAssociation | None:
    """The paper design's experiment when the table asks for it (None for the controlled one)."""
    if not check_paper_table(table):
        return None
    t = validate(table, WordAssociationTable)
    pack = pack_setting(t.stimuli, base_dir)
    return PaperWordAssociation(pack, settings, seed)


def paper_prompts(item: Mapping[str, Any], pack: StimuliPack) -> tuple[tuple[int | None, str], ...]:
    """The prompts the paper design sends for a stored word-association item
    (`TrialKind.paper_prompts`): its words and label order in the item's template, or, when the
    item names none, in each of the three (the import check records the one that matches)."""
    language = item.get("language")
    if item.get("design") != PAPER or language not in PAPER_LABELS:
        return ()
    templates = pack.templates if language == "en" else spanish_templates()
    chosen = item.get("template")
    numbers = sorted(templates) if chosen is None else [chosen]
    order = [str(label) for label in item.get("label_order", ())]
    words = [str(w["word"]) for w in item.get("words", ())]
    return tuple(
        (n, fill_template(templates[n], order, words, str(language)))
        for n in numbers
        if n in templates
    )

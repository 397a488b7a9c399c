"""Planning the word-association experiment (after Bai et al. 2025) and its explicit check.

Implicit trial i of a category: `words_per_sentiment` positive and as many negative concepts,
drawn without replacement from the category, shuffled; one of the K templates uniformly; the
two labels in random order. All three draws come from
`rng_for(seed, "word_association", category, i)`, which depends on neither the model nor the
language: every model sees the same trial, and English and Spanish trial i show the same
concepts with the same template number and label order (paired comparisons everywhere).
Specs are yielded `for i: for category: for language`, so a run stopped part-way leaves every
category and language with about the same number of trials.

Explicit check i of a category asks whether one group is more <quality> than the other; the
quality alternates positive (even i) / negative (odd i) so both are asked equally often, and
the label order is drawn from `rng_for(seed, "word_association_explicit", category, i)`.

Items are self-describing (words with sentiment in the order shown, labels as shown, label
order, template, groups, smoothing): parsing and analysis never need the messages, and
`ibias import` can build items for replies collected elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibias.prompts.base import Experiment, TrialSpec, rng_for
from ibias.prompts.word_association.data import Category, render
from ibias.prompts.word_association.items import (
    Word,
    WordAssociationExplicitItem,
    WordAssociationItem,
)
from ibias.prompts.word_association.settings import Settings, parse_settings

EXPERIMENT = "word_association"
EXPLICIT_EXPERIMENT = "word_association_explicit"


def build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    """Validate the config table and return the implicit (and, if asked, explicit) experiment.

    `design = "paper"` plans the implicit trials from the stimuli pack's templates instead
    (prompts/word_association/paper.py); the explicit check is ours in both designs."""
    from ibias.prompts.word_association.paper import check_paper_table, paper_experiment

    check_paper_table(table)
    settings = parse_settings(table, base_dir)
    paper = paper_experiment(table, settings, seed, base_dir)
    out: list[Experiment] = [paper if paper is not None else WordAssociation(settings, seed)]
    if settings.explicit_per_category > 0:
        out.append(WordAssociationExplicit(settings, seed))
    return out


@dataclass(frozen=True)
class TrialDraw:
    """The language-independent draws of one implicit trial."""

    concepts: tuple[int, ...]
    template: int
    target_first: bool


def draw_trial(settings: Settings, seed: int, category: Category, trial_index: int) -> TrialDraw:
    """Concepts (shown order), template number (1..K) and label order for one trial."""
    n_templates = len(settings.templates[settings.languages[0]].implicit)
    return draw(seed, category, trial_index, settings.words_per_sentiment, n_templates)


def draw(
    seed: int, category: Category, trial_index: int, per_sentiment: int, n_templates: int
) -> TrialDraw:
    """The draws of trial `trial_index` of a category. Both designs use it with the same
    seed, so a paper-design trial shows the same concepts, template number and label order as
    the controlled trial of the same index: the two designs are paired too."""
    rng = rng_for(seed, EXPERIMENT, category.slug, trial_index)
    k = per_sentiment
    chosen = rng.sample(category.pool("positive"), k) + rng.sample(category.pool("negative"), k)
    rng.shuffle(chosen)
    template = rng.randrange(n_templates) + 1
    target_first = rng.random() < 0.5
    return TrialDraw(tuple(chosen), template, target_first)


def _label_order(settings: Settings, language: str, target_first: bool) -> list[str]:
    target, reference = settings.labels[language]
    return [target, reference] if target_first else [reference, target]


@dataclass(frozen=True)
class WordAssociation:
    """The implicit word-association experiment (`Experiment` protocol)."""

    settings: Settings
    seed: int
    name: str = EXPERIMENT

    def count(self) -> int:
        s = self.settings
        return s.trials_per_category * len(s.categories) * len(s.languages)

    def specs(self) -> Iterator[TrialSpec]:
        s = self.settings
        for i in range(s.trials_per_category):
            for category in s.categories:
                draw = draw_trial(s, self.seed, category, i)
                for language in s.languages:
                    yield self._spec(category, i, draw, language)

    def _spec(self, category: Category, i: int, draw: TrialDraw, language: str) -> TrialSpec:
        s = self.settings
        words = [
            {
                "word": category.concepts[c].forms[language],
                "sentiment": category.concepts[c].sentiment,
            }
            for c in draw.concepts
        ]
        order = _label_order(s, language, draw.target_first)
        template = s.templates[language].implicit[draw.template - 1]
        text = render(
            template,
            {
                "words": ", ".join(w["word"] for w in words),
                "word_lines": "\n".join(w["word"] for w in words),
                "label_1": order[0],
                "label_2": order[1],
            },
        )
        item = WordAssociationItem(
            category=category.slug,
            language=language,
            trial_index=i,
            template=draw.template,
            words=tuple(Word(w["word"], w["sentiment"]) for w in words),  # type: ignore[arg-type]
            target_label=s.labels[language][0],
            reference_label=s.labels[language][1],
            label_order=tuple(order),
            target_group=s.target,
            reference_group=s.reference,
            bias_smoothing=s.bias_smoothing,
        )
        return TrialSpec(
            experiment=EXPERIMENT,
            language=language,
            coords={"category": category.slug, "trial_index": i},
            item=item.to_json(),
            messages=({"role": "user", "content": text},),
        )


@dataclass(frozen=True)
class WordAssociationExplicit:
    """The explicit check: "is one group more <quality> than the other?" per category."""

    settings: Settings
    seed: int
    name: str = EXPLICIT_EXPERIMENT

    def count(self) -> int:
        s = self.settings
        return s.explicit_per_category * len(s.categories) * len(s.languages)

    def specs(self) -> Iterator[TrialSpec]:
        s = self.settings
        for i in range(s.explicit_per_category):
            polarity = "positive" if i % 2 == 0 else "negative"
            for category in s.categories:
                target_first = rng_for(self.seed, EXPLICIT_EXPERIMENT, category.slug, i).random()
                for language in s.languages:
                    yield self._spec(category, i, polarity, target_first < 0.5, language)

    def _spec(
        self, category: Category, i: int, polarity: str, target_first: bool, language: str
    ) -> TrialSpec:
        s = self.settings
        quality = s.qualities[category.slug][language][polarity]
        order = _label_order(s, language, target_first)
        template = s.templates[language].explicit
        assert template is not None  # checked by parse_settings
        text = render(template, {"quality": quality, "label_1": order[0], "label_2": order[1]})
        item = WordAssociationExplicitItem(
            category=category.slug,
            language=language,
            trial_index=i,
            polarity=polarity,  # type: ignore[arg-type]
            quality=quality,
            target_label=s.labels[language][0],
            reference_label=s.labels[language][1],
            label_order=tuple(order),
            target_group=s.target,
            reference_group=s.reference,
        )
        return TrialSpec(
            experiment=EXPLICIT_EXPERIMENT,
            language=language,
            coords={"category": category.slug, "trial_index": i},
            item=item.to_json(),
            messages=({"role": "user", "content": text},),
        )

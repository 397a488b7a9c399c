"""The per-template shift of the simulated word association, and the expected score it implies
(checked by counting every possible reply, and against simulated, parsed trials)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import pytest
from scipy.special import expit, logit
from scipy.stats import binom

from ibias.prompts.base import Persona, TrialSpec, rng_for, stable_hash
from ibias.prompts.word_association.experiment import build
from ibias.prompts.word_association.parse import parse_trial
from ibias.prompts.word_association.simulate import (
    expected_word_score,
    respond,
    score_distribution,
    template_bias,
)

HERE = Path(__file__).parent
SHIFTED = Persona(word_bias=0.6, template_shift=(0.0, 1.0, -1.0))
Z = 3.29


def _rng(spec: TrialSpec) -> random.Random:
    return rng_for(0, "sim-a", stable_hash(list(spec.messages)))


def _implicit(trials: int, **extra: object) -> list[TrialSpec]:
    table = {"trials_per_category": trials, "explicit_per_category": 0, **extra}
    return list(build(table, 99, HERE)[0].specs())


def test_template_bias_is_the_logit_shift() -> None:
    assert template_bias(SHIFTED, 1) == 0.6  # shift 0: the word bias itself, exactly
    assert template_bias(SHIFTED, 2) == pytest.approx(float(expit(logit(0.6) + 1.0)), abs=1e-15)
    assert template_bias(SHIFTED, 3) == pytest.approx(float(expit(logit(0.6) - 1.0)), abs=1e-15)
    assert template_bias(SHIFTED, 4) == 0.6 and template_bias(SHIFTED, 0) == 0.6
    assert template_bias(Persona(word_bias=1.0, template_shift=(-5.0,)), 1) == 1.0


def test_each_prompt_is_answered_with_its_template_s_bias() -> None:
    """The reply to a template-k prompt is exactly the reply of a persona whose word bias is
    p_k: the simulator recognised template k from the text (every template and language)."""
    specs = _implicit(10)
    assert {(s.language, s.item["template"]) for s in specs} == {
        (lang, k) for lang in ("en", "es") for k in (1, 2, 3)
    }
    differs = 0
    for spec in specs:
        k = spec.item["template"]
        shifted = respond(spec.messages, SHIFTED, _rng(spec))
        assert shifted == respond(
            spec.messages, Persona(word_bias=template_bias(SHIFTED, k)), _rng(spec)
        )
        differs += shifted != respond(spec.messages, Persona(word_bias=0.6), _rng(spec))
        # no shift, or zero shifts: the reply of today's simulator
        assert respond(
            spec.messages, Persona(word_bias=0.6, template_shift=(0.0,) * 3), _rng(spec)
        ) == (respond(spec.messages, Persona(word_bias=0.6), _rng(spec)))
    assert differs > len(specs) // 4


def test_paper_prompts_get_no_template_shift(paper_pack_dir: Path) -> None:
    table = {"design": "paper", "stimuli": str(paper_pack_dir), "trials_per_category": 3}
    specs = list(build({**table, "explicit_per_category": 0}, 5, HERE)[0].specs())
    assert specs
    for spec in specs:
        reply = respond(spec.messages, SHIFTED, _rng(spec))
        assert reply is not None
        assert reply == respond(spec.messages, Persona(word_bias=0.6), _rng(spec))


def _by_counting(
    p: float, n_negative: int, n_positive: int, smoothing: float
) -> tuple[float, float]:
    """Every one of the 2^(n_negative + n_positive) replies, its probability and score."""
    defined = total = 0.0
    for sides in itertools.product((0, 1), repeat=n_negative + n_positive):  # 1 = target
        neg, pos = sides[:n_negative], sides[n_negative:]
        weight = math.prod(p if s else 1 - p for s in neg) * math.prod(
            (1 - p) if s else p for s in pos
        )
        nt, pt = sum(neg), sum(pos)
        target, reference = nt + pt, n_negative + n_positive - nt - pt
        if smoothing == 0 and (target == 0 or reference == 0):
            continue
        score = nt / (target + smoothing) + (n_positive - pt) / (reference + smoothing) - 1
        defined += weight
        total += weight * score
    return defined, total / defined


@pytest.mark.parametrize(
    ("p", "n_negative", "n_positive", "smoothing"),
    [(0.7, 5, 5, 0.0), (0.5, 5, 5, 0.0), (0.9, 5, 5, 0.01), (0.3, 4, 6, 0.0), (0.99, 3, 2, 0.0)],
)
def test_score_distribution_by_counting(
    p: float, n_negative: int, n_positive: int, smoothing: float
) -> None:
    got = score_distribution(p, n_negative, n_positive, smoothing)
    assert got == pytest.approx(_by_counting(p, n_negative, n_positive, smoothing), abs=1e-12)


def test_the_expected_score_is_not_2p_minus_1() -> None:
    """p = 0.7: 0.43515 (as the simulator tests enumerate with scipy), not 0.4; over the three
    templates the mixture weights each template by its chance of a defined score."""
    assert expected_word_score(Persona(word_bias=0.7)) == pytest.approx(0.435151, abs=1e-6)
    parts = [score_distribution(template_bias(SHIFTED, k)) for k in (1, 2, 3)]
    mixture = sum(d * m for d, m in parts) / sum(d for d, _ in parts)
    assert expected_word_score(SHIFTED) == pytest.approx(mixture, abs=1e-15)
    assert expected_word_score(SHIFTED, 2) == pytest.approx(parts[1][1], abs=1e-15)
    # at p = 1 every negative word goes to the target: always +1, defined
    assert score_distribution(1.0) == (1.0, 1.0)
    # all words to one group under smoothing 0: never defined
    assert math.isnan(score_distribution(1.0, 5, 0)[1])
    p, k = 0.8, 5
    everything_to_target = binom.pmf(k, k, p) * binom.pmf(k, k, 1 - p)
    everything_to_reference = binom.pmf(0, k, p) * binom.pmf(0, k, 1 - p)
    defined = 1 - everything_to_target - everything_to_reference
    assert score_distribution(p)[0] == pytest.approx(defined, abs=1e-15)


def test_simulated_scores_per_template_match_the_expectation() -> None:
    """3,200 parsed trials (8 categories x 2 languages x 200): the mean score of each template's
    trials is within 3.29 standard errors of `expected_word_score(persona, k)`, and the mean of
    all within 3.29 of the mixture; the planted order of the templates shows."""
    scores: dict[int, list[float]] = {1: [], 2: [], 3: []}
    for spec in _implicit(200):
        result = parse_trial(spec.item, respond(spec.messages, SHIFTED, _rng(spec)))
        assert result.n_unassigned == 0
        if result.bias is not None:
            scores[spec.item["template"]].append(result.bias)

    def check(values: list[float], expected: float) -> float:
        n = len(values)
        mean = sum(values) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
        assert abs(mean - expected) < Z * sd / math.sqrt(n), (mean, expected)
        return mean

    means = [check(scores[k], expected_word_score(SHIFTED, k)) for k in (1, 2, 3)]
    check([x for k in (1, 2, 3) for x in scores[k]], expected_word_score(SHIFTED))
    assert means[2] < means[0] < means[1]

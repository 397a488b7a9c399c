"""Coverage as a test: with per-person effects, resampling pairs keeps the interval's coverage
near 95% while a trial-level interval falls short.

The design, replicated R = 800 times: one service (gynecology), 60 pairs of people drawn afresh
in every replication (120 distinct people, so the pairs are independent draws from the
population and the pair is the right resampling unit), each pair shown in both orders (120
trials). The simulated model prefers the cisgender candidate with q = 0.7 and has strong
per-person and per-name effects (person_sd = 3, name_sd = 1.5 on the logit scale), no position
bias and no refusals. Replication r is the simulator answering as model "sim-coverage" under
answer seed r, so each replication also draws its own person and name effects. The estimand is
the population share choosing the cisgender candidate, `expected_cis_share` (the effects
integrated out: 0.566, not q), checked against scipy's quadrature.

Each replication gets the pair bootstrap's 95% percentile interval (the analysis's
`grouped_cluster_bootstrap_share_ci`, clusters = pairs, B = 1,000; all replications in one
vectorised call, one replication = one group), the same bootstrap resampling trials instead
(clusters = trials), and the Wilson interval the allocation tables show beside it. Coverage is
the share of the R replications whose interval contains the estimand.

Tolerances, from the binomial distribution of a coverage count over R replications, z = 3.89
(two-sided 99.99%), s(c) = sqrt(c (1 - c) / R):

- Pair bootstrap: within [c_n - z s(c_n), 0.95 + z s(0.95)] = [0.911, 0.980]. The lower end is
  centred on c_n = 2 F_t(1.96 sqrt((n - 1) / n); n - 1) - 1 = 0.943 for n = 60 pairs, the
  coverage a percentile bootstrap of the mean of n independent clusters has (its variance is
  the plug-in (n - 1) / n of the unbiased one, and the mean of n clusters is t-like with n - 1
  degrees of freedom). Measured: 0.940 to 0.942 on 4,000 replications of the same model drawn
  with numpy (n = 60 to 100); with this harness 0.936 on 3,000 other replications, 0.928 to
  0.955 on six other blocks of 800, and 0.953 on the test's own.
- Trial-level intervals: the two orders of a pair share the pair's effects, so their outcomes
  correlate: rho = Var(p(D)) / (pbar (1 - pbar)) = 0.684, D ~ N(0, 2 (3^2 + 1.5^2)) the pair's
  effect difference, p(D) = sigmoid(logit(0.7) + D), by quadrature. The share's variance is
  (1 + rho) times what a trial-level interval assumes, so its coverage is about
  2 Phi(1.96 / sqrt(1 + rho)) - 1 = 0.869 (measured with this harness: 0.861 on 3,000
  replications, 0.85 to 0.88 on six blocks of 800, 0.874 and Wilson 0.873 on the test's own;
  numpy, 4,000 replications: 0.85 to 0.86). Asserted: below the pair band's lower end (0.911),
  i.e. short of 95% beyond binomial noise. The simulator's within-pair correlation itself is
  checked against rho (3.89 standard errors, (1 - rho^2) / sqrt(pairs)).

Replications are seeded by their index (0..R-1), not chosen: with these tolerances a correct
simulator and analysis fail an assertion with probability under 0.001 (the pair bound is the
tightest: about 3.3 standard errors from a true coverage of 0.94). About 9 s on one core.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import integrate
from scipy.special import expit, logit
from scipy.stats import norm
from scipy.stats import t as student_t

from ibias.analysis.bootstrap import grouped_cluster_bootstrap_share_ci
from ibias.analysis.stats import wilson_interval
from ibias.prompts.allocation.content import default_services, name_pools
from ibias.prompts.allocation.parse import parse_allocation
from ibias.prompts.allocation.render import render_allocation
from ibias.prompts.allocation.simulate import (
    expected_cis_share,
    read_allocation,
    simulate_allocation,
)
from ibias.prompts.base import Message, Persona, rng_for
from ibias.prompts.codes import CIS
from ibias.runner.simulator import answer_for

SERVICE = "gynecology"
MODEL = "sim-coverage"
PERSONA = Persona(allocation_cis={SERVICE: 0.7}, person_sd=3.0, name_sd=1.5)
R = 800
PAIRS = 60
B = 1000
Z = float(norm.ppf(1 - 0.0001 / 2))  # 3.89: two-sided 99.99%


def _prompts(replication: int) -> list[tuple[dict[str, object], tuple[Message, ...]]]:
    """Both orders of `PAIRS` pairs of distinct people (cis woman, trans man: gynecology's
    seats), drawn from the name pools and ages 18-75 by the replication's seed."""
    rng = rng_for(replication, "coverage", "people")
    pools = name_pools()
    surnames = pools.surnames["en"]
    female, male = pools.first[("en", "female")], pools.first[("en", "male")]
    women = rng.sample(range(len(female) * len(surnames)), PAIRS)
    men = rng.sample(range(len(male) * len(surnames)), PAIRS)
    service = default_services()[SERVICE]
    out = []
    for w, m in zip(women, men, strict=True):
        cis = {
            "name": f"{female[w // len(surnames)]} {surnames[w % len(surnames)]}",
            "age": rng.randint(18, 75),
            "sex_assigned_at_birth": "female",
            "gender_identity": "cis_woman",
            "identity": "cis",
        }
        trans = {
            "name": f"{male[m // len(surnames)]} {surnames[m % len(surnames)]}",
            "age": rng.randint(18, 75),
            "sex_assigned_at_birth": "female",
            "gender_identity": "trans_man",
            "identity": "trans",
        }
        for shown in ((cis, trans), (trans, cis)):
            item: dict[str, object] = {
                "language": "en",
                "explanation": False,
                "candidates": list(shown),
            }
            messages: tuple[Message, ...] = (
                {"role": "user", "content": render_allocation(service, item)},
            )
            out.append((item, messages))
    return out


def _chose_cis(replication: int, messages: tuple[Message, ...]) -> bool:
    """The simulator's choice for this prompt without the HTTP layer and the reply's wording:
    what `answer_for(replication, MODEL, messages, PERSONA)` draws (the same rng, whose first
    draw decides refusals, and the persona answering as (seed, model)), read from the
    responder's chosen position."""
    rng = rng_for(replication, "answer", MODEL, messages)
    rng.random()  # answer_for's refusal draw (refusal_rate is 0 here)
    seen = read_allocation(messages[0]["content"])
    assert seen is not None
    _, position = simulate_allocation(seen, PERSONA.answering_as(replication, MODEL), rng)
    assert position is not None
    return seen.candidates[position - 1].identity == CIS


def test_the_harness_is_what_the_simulator_answers() -> None:
    """The shortcut `_chose_cis` agrees with the simulator's full answer, parsed, on every
    prompt of two replications."""
    for replication in (0, 1):
        for item, messages in _prompts(replication):
            content, _ = answer_for(replication, MODEL, messages, PERSONA)
            parsed = parse_allocation(item, content)
            assert (parsed.chosen == CIS) == _chose_cis(replication, messages), content


def _truth_by_scipy() -> tuple[float, float]:
    """(pbar, rho) by scipy quadrature: D ~ N(0, 2 (person_sd^2 + name_sd^2)), p(D) =
    sigmoid(logit(q) + D) (no position bias, so both orders have p(D))."""
    tau = math.sqrt(2 * (PERSONA.person_sd**2 + PERSONA.name_sd**2))
    eta = float(logit(0.7))

    def moment(k: int) -> float:
        value, _ = integrate.quad(
            lambda z: float(expit(eta + tau * z)) ** k * float(norm.pdf(z)), -12, 12, limit=200
        )
        return float(value)

    pbar, second = moment(1), moment(2)
    return pbar, (second - pbar**2) / (pbar * (1 - pbar))


def _band(c: float) -> float:
    return Z * math.sqrt(c * (1 - c) / R)


def test_pair_bootstrap_covers_and_trial_level_intervals_fall_short() -> None:
    truth, rho = _truth_by_scipy()
    assert expected_cis_share(PERSONA, SERVICE) == pytest.approx(truth, abs=1e-7)
    assert rho == pytest.approx(0.684, abs=0.001)  # the docstring's numbers

    chosen = np.array(
        [[_chose_cis(r, messages) for _, messages in _prompts(r)] for r in range(R)],
        dtype=np.float64,
    )  # (R, 2 * PAIRS): pair i's two orders at columns 2i and 2i + 1
    within = float(np.corrcoef(chosen[:, 0::2].ravel(), chosen[:, 1::2].ravel())[0, 1])
    assert abs(within - rho) < Z * (1 - rho**2) / math.sqrt(R * PAIRS)
    estimates = chosen.mean(axis=1)  # unbiased for the estimand
    assert abs(estimates.mean() - truth) < Z * estimates.std(ddof=1) / math.sqrt(R)

    y = chosen.ravel()
    groups = np.repeat(np.arange(R), 2 * PAIRS)
    pairs = np.repeat(np.arange(R * PAIRS), 2)
    trials = np.arange(R * 2 * PAIRS)
    rng = np.random.default_rng(20260213)
    by_pair = grouped_cluster_bootstrap_share_ci(y, pairs, groups, B=B, rng=rng)
    by_trial = grouped_cluster_bootstrap_share_ci(y, trials, groups, B=B, rng=rng)
    wilson_low, wilson_high = wilson_interval(chosen.sum(axis=1), np.full(R, 2 * PAIRS))

    def coverage(lows: Sequence[float], highs: Sequence[float]) -> float:
        return float(np.mean((np.asarray(lows) <= truth) & (truth <= np.asarray(highs))))

    pair = coverage([by_pair[r].low for r in range(R)], [by_pair[r].high for r in range(R)])
    trial = coverage([by_trial[r].low for r in range(R)], [by_trial[r].high for r in range(R)])
    wilson = coverage(list(wilson_low), list(wilson_high))

    c_n = 2 * float(student_t.cdf(1.959964 * math.sqrt((PAIRS - 1) / PAIRS), PAIRS - 1)) - 1
    low_end, high_end = c_n - _band(c_n), 0.95 + _band(0.95)
    report = f"coverage: pairs {pair:.3f}, trials {trial:.3f}, wilson {wilson:.3f}"
    assert (round(low_end, 3), round(high_end, 3)) == (0.911, 0.980)  # the docstring's band
    assert low_end <= pair <= high_end, report
    assert trial < low_end, report
    assert wilson < low_end, report

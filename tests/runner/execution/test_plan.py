"""The planner: deterministic keys, paired models, proportional interleaving."""

from __future__ import annotations

import hashlib

import orjson

from ibias.prompts.base import TrialSpec, stable_hash
from ibias.runner.config import load_config
from ibias.runner.execution.plan import build_experiments, merge_specs, trials_for
from tests.helpers import model_block, write_config


def test_trial_key_is_sha256_of_canonical_json(tmp_path):
    cfg = load_config(
        write_config(
            tmp_path, [model_block("a", provider="simulator", model="prov-a")], n_prompts=2
        )
    )
    trial = next(trials_for(build_experiments(cfg), cfg.models))
    canonical = orjson.dumps(
        {
            "experiment": "prompts",
            "coords": {"id": "p0"},
            "model_id": "a",
            "model": "prov-a",
            "messages": [{"role": "user", "content": "Say something about item p0."}],
            "params": {"temperature": 0.0, "max_tokens": 512},
            "replicate": 0,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    assert trial.trial_key == hashlib.sha256(canonical).hexdigest()


def test_keys_unique_and_models_paired(tmp_path):
    blocks = [
        model_block("a", provider="simulator", model="same"),
        model_block("b", provider="simulator", model="same"),
    ]
    cfg = load_config(write_config(tmp_path, blocks, n_prompts=20, replicates=3))
    trials = list(trials_for(build_experiments(cfg), cfg.models))
    assert len(trials) == 120
    assert len({t.trial_key for t in trials}) == 120
    # models innermost: consecutive trials are the same item for each model
    for a, b in zip(trials[::2], trials[1::2], strict=True):
        assert (a.model_id, b.model_id) == ("a", "b")
        assert a.messages == b.messages and a.coords == b.coords


def test_planning_twice_is_identical(tmp_path):
    cfg = load_config(
        write_config(tmp_path, [model_block("a", provider="simulator")], n_prompts=50)
    )
    first = [t.trial_key for t in trials_for(build_experiments(cfg), cfg.models)]
    second = [t.trial_key for t in trials_for(build_experiments(cfg), cfg.models)]
    assert first == second


class FakeExperiment:
    def __init__(self, name: str, n: int) -> None:
        self._name, self.n = name, n

    @property
    def name(self) -> str:
        return self._name

    def count(self) -> int:
        return self.n

    def specs(self):
        for i in range(self.n):
            yield TrialSpec(
                experiment=self._name,
                language="en",
                coords={"i": i},
                item={},
                messages=({"role": "user", "content": str(i)},),
            )


def test_merge_spreads_small_experiments_through_the_run():
    merged = [
        s.experiment
        for s in merge_specs([FakeExperiment("big", 900), FakeExperiment("small", 100)])
    ]
    assert merged.count("big") == 900 and merged.count("small") == 100
    # in every tenth of the run the small experiment has its tenth of trials (+-1)
    for k in range(10):
        chunk = merged[k * 100 : (k + 1) * 100]
        assert abs(chunk.count("small") - 10) <= 1


def test_stable_hash_independent_of_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})

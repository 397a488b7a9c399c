"""Config -> a lazy, deterministic stream of trials.

Experiments yield model-independent specs; the planner crosses each spec with the models and
computes the trial key. Streams from several experiments are merged in proportion to their
sizes, so the explicit checks are spread through a run instead of bunched at its start and an
interrupted run leaves a balanced partial dataset.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ibias.prompts.base import Experiment, TrialSpec, stable_hash
from ibias.prompts.registry import EXPERIMENT_BUILDERS
from ibias.runner.config import Config, ModelConfig
from ibias.store.trial import Trial

__all__ = ["Trial", "build_experiments", "merge_specs", "trial_key", "trials_for"]


def trial_key(spec: TrialSpec, model: ModelConfig, params: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of everything that makes two requests different.

    The model id and the provider's model name are both in it, so two configured models never
    share a key even when they point at the same provider model.
    """
    return stable_hash(
        {
            "experiment": spec.experiment,
            "coords": spec.coords,
            "model_id": model.id,
            "model": model.model,
            "messages": spec.messages,
            "params": params,
            "replicate": spec.replicate,
        }
    )


def build_experiments(config: Config) -> list[Experiment]:
    """The config's experiments (built once, when the config was validated)."""
    if config.built:
        return list(config.built)
    out: list[Experiment] = []
    for name, table in config.experiments.items():
        out.extend(EXPERIMENT_BUILDERS[name](table, config.run.seed, config.base_dir))
    return out


def merge_specs(experiments: Iterable[Experiment]) -> Iterator[TrialSpec]:
    """Interleave experiments' streams in proportion to their counts (lazily)."""
    heap: list[tuple[float, int, Iterator[TrialSpec], int]] = []
    for index, exp in enumerate(experiments):
        n = exp.count()
        if n > 0:
            heap.append((0.5 / n, index, iter(exp.specs()), n))
    heapq.heapify(heap)
    emitted = [0] * (max((h[1] for h in heap), default=-1) + 1)
    while heap:
        _, index, stream, n = heapq.heappop(heap)
        spec = next(stream, None)
        if spec is None:
            continue
        yield spec
        emitted[index] += 1
        heapq.heappush(heap, ((emitted[index] + 0.5) / n, index, stream, n))


def trials_for(experiments: Iterable[Experiment], models: Iterable[ModelConfig]) -> Iterator[Trial]:
    """Every spec crossed with the given models, in spec order (models innermost)."""
    model_list = [(m, m.params()) for m in models]
    for spec in merge_specs(experiments):
        for model, params in model_list:
            yield Trial(
                trial_key=trial_key(spec, model, params),
                experiment=spec.experiment,
                model_id=model.id,
                language=spec.language,
                coords=spec.coords,
                item=spec.item,
                messages=spec.messages,
                params=params,
                replicate=spec.replicate,
            )

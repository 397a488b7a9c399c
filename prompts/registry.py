"""Which config table builds which experiments.

A builder validates its `[experiments.NAME]` table (raising SettingsError with the key path) and
returns the experiments it defines; the config loader calls it to validate, the planner to plan.
Builders for the paper's experiments are imported lazily so a missing optional module never
breaks `prompts` configs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ibias.prompts import adhoc
from ibias.prompts.base import Experiment

Builder = Callable[[Mapping[str, Any], int, Path], list[Experiment]]


def _word_association(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    from ibias.prompts.word_association.experiment import build

    return build(table, seed, base_dir)


def _allocation(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    from ibias.prompts.allocation.experiment import build

    return build(table, seed, base_dir)


EXPERIMENT_BUILDERS: dict[str, Builder] = {
    "prompts": adhoc.build,
    "word_association": _word_association,
    "allocation": _allocation,
}

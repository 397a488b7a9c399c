"""Model versions: the versioned name a simulated model reports, and its drift to a newer one.

Providers answer a stable model name with a dated snapshot in the body, and update the
snapshot behind the name now and then; store/drift.py notices when a run's answers change
version. A profile's `drift_after = N` makes a model report `DRIFTED_VERSION_SUFFIX` instead
of `MODEL_VERSION_SUFFIX` from its N+1-th answer on, so that detection can be tested.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibias.runner.simulator.faults import ModelState

#: Suffix of the versioned model name reported in bodies (providers report dated snapshots).
MODEL_VERSION_SUFFIX = "-sim-2026-01"
#: ... and after a profile's `drift_after` answers, the newer snapshot it reports instead.
DRIFTED_VERSION_SUFFIX = "-sim-2026-02"


def first_version(model: str) -> str:
    """The versioned name `model` reports until it drifts."""
    return f"{model}{MODEL_VERSION_SUFFIX}"


def drift(state: ModelState, served: int) -> None:
    """Move the model to its newer version once it has `served` its `drift_after` answers
    (before the answer being written, so that answer is the first of the new version)."""
    after = state.profile.drift_after
    if after is not None and served >= after:
        state.reported = f"{state.name}{DRIFTED_VERSION_SUFFIX}"

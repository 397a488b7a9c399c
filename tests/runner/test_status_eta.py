"""The ETA the status file shows: a tenth of a second at most off, and never 0 while trials
remain (0 reads as done; a fast model stopped a few hundred trials short is due in
milliseconds, which used to round to 0.0)."""

from __future__ import annotations

import pytest

from ibias.runner.status import _shown_eta


@pytest.mark.parametrize(
    ("eta", "shown"), [(0.0, 0.0), (0.004, 0.1), (0.05, 0.1), (0.16, 0.2), (12.34, 12.3)]
)
def test_a_remaining_trial_never_shows_an_eta_of_zero(eta: float, shown: float) -> None:
    assert _shown_eta(eta) == shown

"""The paper's stimuli pack as the project keeps it in `shared/`, beside the repository checkout
(here and in CI). Outside CI a missing folder skips the tests that need it; in CI it fails them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PAPER_PACK = Path(__file__).parents[2] / "shared" / "data" / "paper_stimuli"


@pytest.fixture
def paper_pack_dir() -> Path:
    if not PAPER_PACK.is_dir():
        message = f"the shared stimuli pack is missing: {PAPER_PACK}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return PAPER_PACK

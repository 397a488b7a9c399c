"""The paper's stimuli pack as the project keeps it in `shared/`, beside the repository checkout
(here and in CI), or any pack `ibias stimuli from-release` made, named by `IBIAS_PAPER_PACK`.
Outside CI a missing folder skips the tests that need it (`make test` lists why tests were
skipped); in CI it fails them.

Tests read only what the pack format holds (stimuli/pack.py). What they need beyond it lives
in `tests/data/`: `example_prompt_hiv_en.txt`, the authors' own example of the hiv prompt for
the first pair they showed (their repository's example, byte for byte), which the renderer
must reproduce.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PAPER_PACK = Path(
    os.environ.get("IBIAS_PAPER_PACK")
    or Path(__file__).parents[2] / "shared" / "data" / "paper_stimuli"
)
#: The authors' example prompt (hiv, first released pair, cis person first): not a pack file.
EXAMPLE_PROMPT_HIV_EN = Path(__file__).parent / "data" / "example_prompt_hiv_en.txt"


@pytest.fixture
def paper_pack_dir() -> Path:
    if not PAPER_PACK.is_dir():
        message = f"the shared stimuli pack is missing: {PAPER_PACK}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return PAPER_PACK

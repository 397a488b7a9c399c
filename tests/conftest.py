"""The paper's stimuli pack as the project keeps it in `shared/`, beside the repository checkout
(here and in CI), or any pack `ibias stimuli from-release` made, named by `IBIAS_PAPER_PACK`.
Outside CI a missing folder skips the tests that need it (`make test` lists why tests were
skipped); in CI it fails them.

Tests read only what the pack format holds (stimuli/pack.py) from the pack under test. What
they need beyond it, the authors' own example of the hiv prompt for the first pair they showed
(which the renderer must reproduce byte for byte), is read from the project's reference copy in
`shared/` whichever pack is under test (`example_prompt_hiv_en`): the repository holds none of
the authors' texts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No installed plugin takes part in the suite: `IBIAS_PLUGINS` empty loads no entry point of any
# group (ibias/plugins.py), here and in every `ibias` subprocess the tests start (they inherit
# the environment). Set when pytest loads this file, before any test imports a registry, so a
# plugin installed beside ibias cannot add an experiment, a provider or a report section to what
# the tests see (tests/test_installed_plugin.py). A test of the plugin mechanism sets or removes
# it in its own environment.
os.environ["IBIAS_PLUGINS"] = ""

SHARED_PACK = Path(__file__).parents[2] / "shared" / "data" / "paper_stimuli"
PAPER_PACK = Path(os.environ.get("IBIAS_PAPER_PACK") or SHARED_PACK)
#: The authors' example prompt (hiv, first released pair, cis person first): not a pack file,
#: so always the shared reference copy's.
EXAMPLE_PROMPT_HIV_EN = SHARED_PACK / "allocation" / "example_prompt_hiv_en.txt"


def _needed(path: Path, what: str) -> Path:
    """`path`, or a skip (a failure under CI) naming what is missing."""
    if not path.exists():
        message = f"{what} is missing: {path}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def paper_pack_dir() -> Path:
    return _needed(PAPER_PACK, "the shared stimuli pack")


@pytest.fixture
def example_prompt_hiv_en() -> bytes:
    return _needed(EXAMPLE_PROMPT_HIV_EN, "the authors' example prompt").read_bytes()


# `make test` runs the suite on two workers, one test file per work unit, in collection order
# (`--dist loadfile --no-loadscope-reorder`). The files below take most of the wall time; they go
# first so that no worker starts one of them when the other has nothing left to do.
SLOW_FIRST = (
    "tests/reliability/test_resume_full_size.py",
    "tests/analysis/test_planted.py",
    "tests/analysis/test_coverage.py",
    "tests/store/test_live.py",
    "tests/reliability/test_torture.py",
    "tests/store/test_prompt_chars.py",
    "tests/store/test_remaining_memory.py",
    "tests/runner/test_cli.py",
    "tests/analysis/test_tables.py",
    "tests/test_installed_plugin.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return SLOW_FIRST.index(path) if path in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: every other test keeps its place

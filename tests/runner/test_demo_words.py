"""The demo says what it runs in the README's words (issue 34): our controlled design's whole
grid on simulated models, not "the paper's grid" (the paper's own design is
configs/paper.toml, and needs the authors' stimuli pack the demo does without)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ibias.runner.config import load_config
from ibias.runner.execution.plan import build_experiments, trials_for
from tests.helpers import IBIAS

ROOT = Path(__file__).resolve().parents[2]


def _help(*args: str) -> str:
    done = subprocess.run([*IBIAS, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def test_demo_help_and_config_name_our_controlled_design() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "run our controlled design's whole grid on 7 simulated models" in readme
    header = "".join(
        line
        for line in (ROOT / "configs" / "demo.toml").read_text("utf-8").splitlines(True)
        if line.startswith("#")
    )
    for text in (_help("demo", "--help"), _help("--help"), " ".join(header.split())):
        assert "controlled design" in text, text
        assert not re.search(r"the paper's (whole )?grid", text), text
    assert "142,240 trials" in _help("demo", "--help")


def test_the_demo_plans_the_controlled_grid_it_says() -> None:
    """The count the words give is the count planned: configs/controlled.toml's experiments."""
    demo = load_config(ROOT / "configs" / "demo.toml")
    controlled = load_config(ROOT / "configs" / "controlled.toml")
    assert dict(demo.experiments) == {
        name: {k: v for k, v in table.items() if k != "bias_smoothing"}
        for name, table in controlled.experiments.items()
    }
    assert sum(1 for _ in trials_for(build_experiments(demo), demo.models)) == 142_240

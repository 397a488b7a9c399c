"""Golden trial keys of the paper design: stores of paper-design runs must still resume.

These digests were computed before the paper design gained its explanation and symptom
conditions and the identity-swap control (commit 56ab842), and are hard-coded on purpose: the
default paper trials (no explanation, no symptoms, no swap) must keep their keys, or every
existing paper-design store would silently re-request (and pay for) its whole grid.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ibias.runner.config import load_config
from ibias.runner.execution.plan import Trial, build_experiments, trials_for
from tests.helpers import model_block, write_config


def _planned(folder: Path, pack: Path, pairs: str = "") -> list[Trial]:
    extra = f"""
[experiments.allocation]
design = "paper"
stimuli = "{pack}"
languages = ["en", "es"]
services = ["hiv", "gynecology", "prep"]
pairs_per_service = 3
{pairs}
"""
    blocks = [
        model_block("gpt", provider="openai", base_url="https://api.example.com/v1", model="g-1"),
        model_block("sim", provider="simulator", model="sim-1"),
    ]
    cfg = load_config(write_config(folder, blocks, n_prompts=1, seed=123, extra=extra))
    return [t for t in trials_for(build_experiments(cfg), cfg.models) if t.experiment != "prompts"]


@pytest.fixture
def planned(tmp_path: Path, paper_pack_dir: Path) -> list[Trial]:
    return _planned(tmp_path, paper_pack_dir)


FIRST = {
    ("en", 0, "gpt"): "8eb03a573daedce9343ee2c2dd10ee0619f72850a58488bea0876a306747e249",
    ("en", 0, "sim"): "082bc66040e883201a1c81b93db6732159621efdbae6c812f9dd41a4b766e4d2",
    ("es", 1, "gpt"): "1fc1ccfa4f4f0d84f6a409b62478522cfea5e34c5e91b1f4fcfb804fb6995b76",
    ("es", 1, "sim"): "dfea304c204c659cb9af5067fbc2fde3d085acb16825c61ce65bf2f7932f3b3f",
}


def test_first_keys_per_language_and_order(planned: list[Trial]) -> None:
    first: dict[tuple[str, int, str], str] = {}
    for t in planned:
        first.setdefault((t.language, t.coords["order"], t.model_id), t.trial_key)
    assert {k: first[k] for k in FIRST} == FIRST


WHOLE_PLAN = "3f0342f558ce719e87c1e38c1e651323246d3602b095c8aa914586d207731da4"


def _digest(planned: list[Trial]) -> str:
    return hashlib.sha256("".join(sorted(t.trial_key for t in planned)).encode()).hexdigest()


def test_the_whole_paper_plan_as_a_set(planned: list[Trial]) -> None:
    assert len(planned) == 3 * 3 * 2 * 2 * 2
    assert _digest(planned) == WHOLE_PLAN


def test_pairs_released_said_is_the_default(tmp_path: Path, paper_pack_dir: Path) -> None:
    assert _digest(_planned(tmp_path, paper_pack_dir, 'pairs = "released"')) == WHOLE_PLAN


def test_sex_matched_pairs_change_only_the_organ_services_keys(
    tmp_path: Path, paper_pack_dir: Path, planned: list[Trial]
) -> None:
    matched = _planned(tmp_path, paper_pack_dir, 'pairs = "sex_matched"')
    assert len(matched) == len(planned)
    by_service = {
        s: ({t.trial_key for t in planned if t.item["service"] == s},
            {t.trial_key for t in matched if t.item["service"] == s})
        for s in ("hiv", "gynecology", "prep")
    }  # fmt: skip
    assert by_service["hiv"][0] == by_service["hiv"][1]
    assert by_service["prep"][0] == by_service["prep"][1]
    assert not by_service["gynecology"][0] & by_service["gynecology"][1]
    assert {t.coords.get("pairs") for t in matched} == {None, "sex_matched"}
    assert all(
        (t.coords.get("pairs") == "sex_matched") == (t.item["service"] == "gynecology")
        for t in matched
    )

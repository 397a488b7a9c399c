"""A unit's own simulator parameters (prompts/simulation.py): a test-defined unit declares a
struct, a run config sets it in `[models.sim.experiments.NAME]`, and the simulated answers
follow it; wrong values are refused in one line naming the key; the built-in units' flat keys
read exactly as their nested tables; and the planted-value check imports nothing of the
runner."""

from __future__ import annotations

import ast
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from ibias import errors
from ibias.prompts import registry
from ibias.prompts.allocation.experiment import build as build_allocation
from ibias.prompts.base import Message, Persona, SettingsError
from ibias.prompts.simulation import Answering, Simulation, persona_from_table, split_sim_table
from ibias.prompts.word_association.experiment import build as build_word_association
from ibias.runner.config import ConfigFileError, parse_config
from ibias.runner.simulator import answer_for, token_logprobs
from ibias.runner.simulator.profile import SimProfile, model_profile_from_dict

ROOT = Path(__file__).resolve().parents[2]
NAME = "occupation"
ASK = "Which occupation fits this person best?"


class OccupationSim(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The probability of answering "nurse" rather than "engineer"."""

    occupation_bias: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5


def _respond(
    messages: tuple[Message, ...], model: Answering[OccupationSim], rng: random.Random
) -> str | None:
    if not messages or messages[-1]["content"] != ASK:
        return None
    return "nurse" if rng.random() < model.params.occupation_bias else "engineer"


UNIT = registry.ExperimentUnit(
    name=NAME,
    title="Occupation association",
    build=lambda table, seed, base: [],
    kinds=(),
    simulation=Simulation(respond=_respond, params=OccupationSim),
)


@pytest.fixture
def occupation() -> Iterator[None]:
    registry.register(UNIT)
    try:
        yield
    finally:
        registry.unregister(NAME)


def _config(tmp_path: Path, sim: str) -> str:
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    return (
        '[[models]]\nid = "sim"\nprovider = "simulator"\n'
        f"{sim}\n"
        '[experiments.prompts]\nfile = "p.jsonl"\n'
    )


def _error(tmp_path: Path, sim: str) -> str:
    path = tmp_path / "cfg.toml"
    with pytest.raises(ConfigFileError) as info:
        parse_config(_config(tmp_path, sim), path)
    message = str(info.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}: ")


def _nurses(persona: Persona, n: int = 400) -> int:
    messages = ({"role": "user", "content": ASK},)
    replies = [answer_for(seed, "sim", messages, persona)[0] for seed in range(n)]
    assert set(replies) <= {"nurse", "engineer"}
    return replies.count("nurse")


def test_a_units_parameters_from_a_run_config_change_its_answers(
    occupation: None, tmp_path: Path
) -> None:
    config = parse_config(
        _config(tmp_path, "[models.sim.experiments.occupation]\noccupation_bias = 0.9\n"),
        tmp_path / "cfg.toml",
    )
    persona = model_profile_from_dict(config.models[0].sim).persona
    assert persona.experiments[NAME] == OccupationSim(occupation_bias=0.9)
    biased = _nurses(persona)
    neutral = _nurses(Persona())
    # Binomial(400, 0.9) and (400, 0.5): 360 +- 6 and 200 +- 10.
    assert biased >= 330 and 160 <= neutral <= 240
    # the same seed and prompt: the answer is a function of the parameters alone
    assert _nurses(model_profile_from_dict(config.models[0].sim).persona) == biased
    # a model that leaves the unit out answers with its defaults, as a persona without it
    assert _nurses(model_profile_from_dict({"refusal_rate": 0.0}).persona) == neutral


@pytest.mark.parametrize(
    ("sim", "expected"),
    [
        (
            "occupation_bias = 1.5",
            "models[0].sim.experiments.occupation.occupation_bias: expected a number from 0 "
            "to 1, got 1.5",
        ),
        (
            'occupation_bias = "high"',
            "models[0].sim.experiments.occupation.occupation_bias: expected a number from 0 "
            "to 1, got 'high'",
        ),
        (
            "occupation_bais = 0.9",
            "models[0].sim.experiments.occupation.occupation_bais: unknown key (expected one "
            "of occupation_bias); did you mean `occupation_bias`?",
        ),
    ],
)
def test_a_wrong_value_is_refused_in_one_line_naming_the_key(
    occupation: None, tmp_path: Path, sim: str, expected: str
) -> None:
    assert _error(tmp_path, f"[models.sim.experiments.occupation]\n{sim}\n") == expected


def test_an_unknown_experiment_is_named_with_a_hint(occupation: None, tmp_path: Path) -> None:
    message = _error(tmp_path, "[models.sim.experiments.ocupation]\noccupation_bias = 0.9\n")
    assert message.startswith(
        "models[0].sim.experiments.ocupation: unknown experiment (did you mean `occupation`?); "
        "expected one of "
    )
    assert "occupation" in message.split("expected one of ")[1].split(", ")
    assert _error(tmp_path, "[models.sim]\nexperiments = 3\n") == (
        "models[0].sim.experiments: expected a table, got 3"
    )
    # without the unit registered, its table is an unknown experiment too
    registry.unregister(NAME)
    assert "unknown experiment" in _error(
        tmp_path, "[models.sim.experiments.occupation]\noccupation_bias = 0.9\n"
    )


def test_a_flat_key_given_nested_too_is_refused(tmp_path: Path) -> None:
    sim = "[models.sim]\nword_bias = 0.6\n[models.sim.experiments.word_association]\n"
    message = _error(tmp_path, sim + "word_bias = 0.7\n")
    assert message == (
        "models[0].sim.word_bias: given twice, here and as "
        "`experiments.word_association.word_bias`; keep one of them"
    )
    # two different fields of one unit, one flat and one nested, are fine
    config = parse_config(_config(tmp_path, sim + "template_shift = [0.1]\n"), tmp_path / "c")
    persona = model_profile_from_dict(config.models[0].sim).persona
    assert (persona.word_bias, persona.template_shift) == (0.6, (0.1,))


FLAT = {
    "word_bias": 0.62,
    "template_shift": [0.0, 0.4, -0.4],
    "allocation_cis": {"gynecology": 0.7, "mental_health": 0.65},
    "allocation_cis_default": 0.55,
    "position_bias": 0.05,
    "person_sd": 0.6,
    "name_sd": 0.3,
    "explanation_effect": {"gynecology": -0.8},
    "urgency_effect": {"hiv_testing": {"high": -1.0, "low": 0.3}},
    "refusal_rate": 0.02,
}
WORD_KEYS = ("word_bias", "template_shift")


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    words = {k: v for k, v in flat.items() if k in WORD_KEYS}
    allocation = {k: v for k, v in flat.items() if k not in WORD_KEYS and k != "refusal_rate"}
    return {
        "refusal_rate": flat["refusal_rate"],
        "experiments": {"word_association": words, "allocation": allocation},
    }


def test_the_flat_keys_give_exactly_the_nested_forms_answers() -> None:
    flat = model_profile_from_dict(FLAT).persona
    nested = model_profile_from_dict(_nested(FLAT)).persona
    assert flat == nested
    assert persona_from_table(FLAT) == flat == persona_from_table(_nested(FLAT))
    assert Persona(**FLAT) == flat  # the flat names construct it from code too
    here = Path(__file__).parent
    specs = [
        s
        for build, table in (
            (build_word_association, {"trials_per_category": 2, "explicit_per_category": 1}),
            (build_allocation, {"pairs_per_service": 2}),
        )
        for experiment in build(table, 5, here)
        for s in experiment.specs()
    ]
    assert len(specs) > 50
    for spec in specs:
        a = answer_for(3, "sim", spec.messages, flat)
        assert a == answer_for(3, "sim", spec.messages, nested)
        assert token_logprobs(3, "sim", spec.messages, flat, a[0], 5) == token_logprobs(
            3, "sim", spec.messages, nested, a[0], 5
        )


def test_a_profile_file_takes_both_forms_and_inherits_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        "[default]\nperson_sd = 1.0\nword_bias = 0.6\n"
        '[models."a".experiments.allocation]\nname_sd = 0.5\n'
        '[models."b"]\nword_bias = 0.7\n'
        '[models."c".experiments.word_association]\nword_bias = 0.8\n'
    )
    profile = SimProfile.from_toml(path)
    a, b, c = (profile.for_model(m).persona for m in "abc")
    assert (a.person_sd, a.name_sd, a.word_bias) == (1.0, 0.5, 0.6)
    assert (b.person_sd, b.word_bias) == (1.0, 0.7)
    assert (c.person_sd, c.word_bias) == (1.0, 0.8)
    path.write_text('[models."x".experiments.allocation]\nperson_sd = 9\n')
    with pytest.raises(SettingsError) as info:
        SimProfile.from_toml(path)
    assert info.value.key == "models.x.experiments.allocation.person_sd"
    assert str(info.value).startswith(f"{path}: models.x.experiments.allocation.person_sd: ")


def test_split_keeps_the_runners_keys_apart() -> None:
    given, rest = split_sim_table({"word_bias": 0.6, "rpm": 10, "refusal_rate": 0.1})
    assert given == {"word_association": {"word_bias": 0.6}}
    assert rest == {"rpm": 10, "refusal_rate": 0.1}


def test_a_simulation_declares_a_frozen_strict_struct_with_defaults() -> None:
    class Loose(msgspec.Struct, frozen=True):
        x: float = 0.0

    class Required(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
        x: float

    with pytest.raises(TypeError, match="forbid_unknown_fields"):
        Simulation(respond=_respond, params=Loose)
    with pytest.raises(TypeError, match="'x' has none"):
        Simulation(respond=_respond, params=Required)
    with pytest.raises(TypeError, match="flat key 'y'"):
        Simulation(respond=_respond, params=OccupationSim, flat_keys=("y",))


class Claiming(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    word_bias: float = 0.5


def test_two_units_cannot_claim_one_flat_key() -> None:
    clash = registry.ExperimentUnit(
        name="clash",
        title="Clash",
        build=lambda table, seed, base: [],
        kinds=(),
        simulation=Simulation(respond=_respond, params=Claiming, flat_keys=("word_bias",)),
    )
    with pytest.raises(errors.RegistryError, match="flat simulator key 'word_bias'"):
        registry.register(clash)
    assert "clash" not in [u.name for u in registry.units()]


def test_the_planted_check_imports_no_runner_module() -> None:
    """By the source (no `ibias.runner` import at any level) and by running it: rebuilding
    the simulated models of a stored config loads no runner module."""
    for name in ("planted.py", "units/allocation/planted.py", "units/word_association/planted.py"):
        tree = ast.parse((ROOT / "analysis" / name).read_text("utf-8"))
        imported = [
            n.module if isinstance(n, ast.ImportFrom) else a.name
            for n in ast.walk(tree)
            if isinstance(n, ast.Import | ast.ImportFrom)
            for a in (n.names if isinstance(n, ast.Import) else [n])
        ]
        assert not [m for m in imported if m and m.startswith("ibias.runner")], name
    code = (
        "import sys\n"
        "from ibias.analysis.planted import simulated_models\n"
        'found = simulated_models([\'[run]\\nseed = 4\\n[[models]]\\nid = "s"\\n'
        'provider = "simulator"\\n[models.sim]\\nword_bias = 0.7\\n'
        "[models.sim.experiments.allocation]\\nperson_sd = 0.5\\n'])\n"
        "assert found[0].persona.word_bias == 0.7 and found[0].persona.person_sd == 0.5\n"
        "score = found[0].truth('expected_word_score')\n"
        "assert score is not None and score[0](score[1]) > 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('ibias.runner')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]", out.stderr

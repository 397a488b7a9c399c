"""Profile keys for the simulator's structure: person and name effects, explanation and urgency
effects per service, a shift per word-association template. All default to 0, are checked with
their bounds, inherit from `[default]` like every other key, and key their random draws by the
answer seed and the model name."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import MappingProxyType

import pytest

from ibias.prompts.allocation.experiment import build
from ibias.prompts.allocation.simulate import cis_probability, read_allocation, respond
from ibias.prompts.base import Persona, SettingsError, rng_for
from ibias.runner.simulator import answer_for
from ibias.runner.simulator.profile import SimProfile, load_profile, model_profile_from_dict

CONFIGS = Path(__file__).resolve().parents[3] / "configs"

PROFILE = """
seed = 9

[default]
person_sd = 1.0
explanation_effect = {gynecology = -0.5}
template_shift = [0.0, 0.3]

[models."sim-a"]
name_sd = 0.5
urgency_effect = {hiv_testing = {high = -1.0, low = 0.25}, mastectomy = {low = 2}}
template_shift = [0.1, -0.2, 0.4]

[models."sim-b"]
person_sd = 0
"""


def test_structure_keys_from_a_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    profile = load_profile(path)
    d = profile.default.persona
    assert (d.person_sd, d.name_sd) == (1.0, 0.0)
    assert d.explanation_effect == {"gynecology": -0.5}
    assert d.template_shift == (0.0, 0.3)
    a = profile.for_model("sim-a").persona
    assert (a.person_sd, a.name_sd) == (1.0, 0.5)  # person_sd inherited
    assert a.explanation_effect == {"gynecology": -0.5}
    assert a.urgency_effect == {
        "hiv_testing": {"high": -1.0, "low": 0.25},
        "mastectomy": {"low": 2},
    }
    assert a.template_shift == (0.1, -0.2, 0.4)  # replaces the default's list as a whole
    assert profile.for_model("sim-b").persona.person_sd == 0.0
    # read-only all the way down
    assert isinstance(a.explanation_effect, MappingProxyType)
    assert isinstance(a.urgency_effect, MappingProxyType)
    assert all(isinstance(v, MappingProxyType) for v in a.urgency_effect.values())
    with pytest.raises(TypeError):
        a.urgency_effect["hiv_testing"]["high"] = 0.0  # type: ignore[index]


def test_every_effect_defaults_to_zero() -> None:
    persona = model_profile_from_dict({"word_bias": 0.6}).persona
    assert persona == Persona(word_bias=0.6)
    assert (persona.person_sd, persona.name_sd) == (0.0, 0.0)
    assert (persona.explanation_effect, persona.urgency_effect) == ({}, {})
    assert persona.template_shift == ()
    assert SimProfile.from_args(seed=1).default.persona == Persona()


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"person_sd": -0.1}, "person_sd"),
        ({"person_sd": 5.5}, "person_sd"),
        ({"name_sd": "big"}, "name_sd"),
        ({"explanation_effect": {"gynecology": 11}}, "explanation_effect.gynecology"),
        ({"explanation_effect": 0.5}, "explanation_effect"),
        ({"urgency_effect": {"hiv_testing": {"medium": 1}}}, "urgency_effect.hiv_testing.medium"),
        ({"urgency_effect": {"hiv_testing": {"high": -12}}}, "urgency_effect.hiv_testing.high"),
        ({"urgency_effect": {"hiv_testing": 1.0}}, "urgency_effect.hiv_testing"),
        ({"template_shift": [0.0, 20.0]}, "template_shift[1]"),
        ({"template_shift": 0.5}, "template_shift"),
    ],
)
def test_bad_values_name_their_key(table: dict[str, object], key: str) -> None:
    with pytest.raises(SettingsError) as info:
        model_profile_from_dict(table, key="models.x")
    assert info.value.key == f"models.x.{key}"


def _gynecology_prompts(n: int) -> list[str]:
    table = {
        "services": ["gynecology"],
        "pairs_per_service": n,
        "explicit_per_service": 0,
        "languages": ["en"],
        "symptoms": ["none"],
        "explanation": [False],
    }
    return [spec.messages[0]["content"] for spec in build(table, 3, Path("."))[0].specs()]


def test_answer_for_keys_person_effects_by_seed_and_model() -> None:
    """answer_for answers with the persona answering as (seed, model): the responder given that
    persona and the same rng (after the refusal draw) writes the same reply; another model or
    another seed draws other person effects for the same people."""
    persona = Persona(allocation_cis={"gynecology": 0.6}, person_sd=1.5, name_sd=0.5)
    texts = _gynecology_prompts(20)
    for text in texts:
        messages = ({"role": "user", "content": text},)
        rng = rng_for(4, "answer", "sim-a", messages)
        rng.random()  # the refusal draw
        expected = respond(messages, persona.answering_as(4, "sim-a"), rng)
        assert answer_for(4, "sim-a", messages, persona)[0] == expected
    seen = [read_allocation(t) for t in texts]
    probabilities = {
        key: [cis_probability(s, persona.answering_as(*key)) for s in seen if s is not None]
        for key in ((4, "sim-a"), (4, "sim-b"), (5, "sim-a"))
    }
    a = probabilities[(4, "sim-a")]
    assert all(len(set(p)) > 10 for p in probabilities.values())  # people differ
    assert a != probabilities[(4, "sim-b")] and a != probabilities[(5, "sim-a")]
    assert a == [cis_probability(s, persona.answering_as(4, "sim-a")) for s in seen if s]


def test_the_demo_plants_each_kind_of_effect() -> None:
    """configs/demo.toml plants a few of each effect (and leaves some models without them, so
    the report has null effects to show too); every sim table is a valid profile table."""
    demo = tomllib.loads((CONFIGS / "demo.toml").read_text(encoding="utf-8"))
    personas = {m["id"]: model_profile_from_dict(m["sim"]).persona for m in demo["models"]}
    for planted in (
        lambda p: p.person_sd > 0,
        lambda p: p.name_sd > 0,
        lambda p: any(p.explanation_effect.values()),
        lambda p: any(v for u in p.urgency_effect.values() for v in u.values()),
        lambda p: any(p.template_shift),
    ):
        hits = sum(planted(p) for p in personas.values())
        assert 1 <= hits < len(personas)

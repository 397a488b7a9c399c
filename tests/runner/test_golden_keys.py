"""Golden trial keys: stores made before the provider registry must still resume.

Resume skips a trial when its `trial_key` already has a response, so a change that alters the
key of an unchanged trial (a provider's own sampling field names leaking into `params`, a new
field in the hashed object, a different canonical JSON) silently re-requests, and pays for, a
whole grid. These digests were computed with the code of commit 2fcb4bc (before providers were
made pluggable) and are hard-coded on purpose: if one of these tests fails, the change broke
resume for every existing store, and the fix is in the change, not here.

The sampling parameters in the key stay neutral (`temperature`, `max_tokens`, optional
`seed`); each provider maps them to its own request fields when it sends them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ibias.prompts.base import TrialSpec
from ibias.runner.config import Config, load_config
from ibias.runner.plan import Trial, build_experiments, trial_key, trials_for
from tests.helpers import model_block, write_config

EXPERIMENTS = """
[experiments.word_association]
languages = ["en", "es"]
categories = "all"
trials_per_category = 2
explicit_per_category = 1

[experiments.allocation]
languages = ["en", "es"]
services = "all"
roster_size = 40
pairs_per_service = 2
explanation = [false, true]
symptoms = ["none", "high", "low"]
explicit_per_service = 1
"""


def _config(folder: Path) -> Config:
    """Two models whose sampling parameters differ (one with a sampling seed), every
    experiment, two replicates of two ad-hoc prompts, run seed 123."""
    blocks = [
        model_block(
            "gpt",
            provider="openai",
            base_url="https://api.example.com/v1",
            model="gpt-x-2025",
            temperature=0.7,
            max_tokens=256,
            sampling_seed=42,
        ),
        model_block("sim", provider="simulator", model="sim-1"),
    ]
    return load_config(
        write_config(folder, blocks, n_prompts=2, replicates=2, seed=123, extra=EXPERIMENTS)
    )


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> list[Trial]:
    cfg = _config(tmp_path_factory.mktemp("golden"))
    return list(trials_for(build_experiments(cfg), cfg.models))


def test_sampling_params_in_the_key_stay_neutral(tmp_path):
    cfg = _config(tmp_path)
    assert [m.params() for m in cfg.models] == [
        {"temperature": 0.7, "max_tokens": 256, "seed": 42},
        {"temperature": 0.0, "max_tokens": 512},
    ]


def test_trial_key_of_a_hand_built_spec(tmp_path):
    cfg = _config(tmp_path)
    spec = TrialSpec(
        experiment="prompts",
        language="",
        coords={"id": "golden"},
        item={"id": "golden"},
        messages=(
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "¿Qué opinas? é"},
        ),
        replicate=3,
    )
    keys = {m.id: trial_key(spec, m, m.params()) for m in cfg.models}
    assert keys == {
        "gpt": "8ebbce3ce0785b370d2a839f1f06e7fe2276b75a0db0632ce02f73a9abc63341",
        "sim": "6aa63a3c2d3c2454a2d083aae6c17204729d1b62f76af2d6da60a42b9bdd2b90",
    }


FIRST_KEYS = {
    ("allocation", "gpt"): "cc5f0b0f2c7b398014d3fcccb406fb25d9b3869dec91c275dc5d32cb111ae34a",
    ("allocation", "sim"): "4880737d45e3756b53b96f852c6962d4b817c33d2ea171649452a8487d7e4d46",
    ("word_association", "gpt"): "ee8b578dae1608146973c47ed48f8dd418e92f139c562aa391837d72b8815a85",
    ("word_association", "sim"): "bd9ab6351b3b9f941164528a9b935c4624820f60afb5e4c29ad6755acebe0fc9",
    (
        "word_association_explicit",
        "gpt",
    ): "79bfbe883f1e45dabcb62219b3afc73eaac38660dcc557c137cb4b25d4027a67",
    (
        "word_association_explicit",
        "sim",
    ): "06af7f7fec9a87d0de4e6c418fb740ef2644ee466d8267349d2a7d5e5860d005",
    (
        "allocation_explicit",
        "gpt",
    ): "b462a08d28f455979d4e3e4d03cefe10937c896974f93993a7b4dac009706019",
    (
        "allocation_explicit",
        "sim",
    ): "6f5ccd2010a277631e9bdbe9dd8e79cf5f6ce81f3062844e2018db9fef580c80",
    ("prompts", "gpt"): "280cc97bfadb9e20cf9fbb6252ed85ce1e16697a957cd5b6a5844a41eb2c3283",
    ("prompts", "sim"): "84e6b8b6379682745e4f7ce9ee0780f6130d893629f202f9ea0172ce5fb36ede",
}


def test_first_key_of_each_experiment_and_model(planned):
    first: dict[tuple[str, str], str] = {}
    for t in planned:
        first.setdefault((t.experiment, t.model_id), t.trial_key)
    assert first == FIRST_KEYS


def test_a_later_replicate(planned):
    keys = {
        t.model_id: t.trial_key
        for t in planned
        if t.experiment == "prompts" and t.coords["id"] == "p1" and t.replicate == 1
    }
    assert keys == {
        "gpt": "46a2d81ae16e1dd0c3944e8800352f5ee844cc2089577dab5b512cd895d13e4f",
        "sim": "de0a3118690558a88d4c0d80e209d67d829eee219041add52efa4ae9f454d1f9",
    }


def test_the_whole_plan_as_a_set(planned):
    # The set, not the order: interleaving may change without breaking resume, keys may not.
    assert len(planned) == 904
    joined = "".join(sorted(t.trial_key for t in planned))
    assert (
        hashlib.sha256(joined.encode()).hexdigest()
        == "0d3edf8a5c285dd68df201725b658b1b0de1a50d5ab527f5ccfcb864decffeb4"
    )


def test_gemini_options_enter_the_key_only_when_set(tmp_path):
    """A Gemini model without options keeps the key it always had; each option, once set,
    changes the key (it changes the reply), and the stored params still build a Sampling."""
    from ibias.runner.providers.base import Sampling

    spec = TrialSpec(
        experiment="prompts",
        language="",
        coords={"id": "golden"},
        item={"id": "golden"},
        messages=({"role": "user", "content": "hi"},),
        replicate=0,
    )
    base = {"provider": "gemini", "base_url": "https://generativelanguage.googleapis.com/v1beta"}
    variants = {
        "plain": {},
        "budget": {"thinking_budget": 0},
        "level": {"thinking_level": "low"},
        "safety": {"safety_settings": {"HARM_CATEGORY_HATE_SPEECH": "BLOCK_NONE"}},
    }
    keys = {}
    for name, options in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (model,) = load_config(
            write_config(folder, [model_block("g", model="gemini-2.5-flash", **base, **options)])
        ).models
        params = model.params()
        assert set(params) == {"temperature", "max_tokens", *options}
        assert Sampling.from_params(params) == Sampling(temperature=0.0, max_tokens=512)
        keys[name] = trial_key(spec, model, params)
    # without options: the digest of the key definition with the neutral params only
    assert keys["plain"] == trial_key(spec, model, {"temperature": 0.0, "max_tokens": 512})
    assert len(set(keys.values())) == len(variants)


def test_an_anthropic_seed_is_refused_rather_than_promised(tmp_path):
    from ibias.runner.config import ConfigError

    block = model_block(
        "c", provider="anthropic", base_url="https://api.anthropic.com/v1", sampling_seed=1
    )
    with pytest.raises(ConfigError, match=r"models\[0\]\.sampling_seed: Anthropic's Messages API"):
        load_config(write_config(tmp_path, [block]))


def _hand_spec() -> TrialSpec:
    return TrialSpec(
        experiment="prompts",
        language="",
        coords={"id": "golden"},
        item={"id": "golden"},
        messages=({"role": "user", "content": "hi"},),
        replicate=0,
    )


def test_logprobs_enter_the_key_only_when_asked_for(tmp_path):
    """A model without `logprobs` keeps the key it always had; asking for logprobs changes
    the key (the request and what is stored differ), `top_logprobs` too, and the stored params
    build the Sampling the provider sends."""
    from ibias.runner.providers.base import Sampling

    base = {"provider": "openai", "base_url": "https://api.example.com/v1", "model": "m"}
    variants: dict[str, dict[str, object]] = {
        "plain": {},
        "on": {"logprobs": True},
        "five": {"logprobs": True, "top_logprobs": 5},
    }
    keys = {}
    for name, options in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (model,) = load_config(write_config(folder, [model_block("o", **base, **options)])).models
        params = model.params()
        keys[name] = trial_key(_hand_spec(), model, params)
        top = {"plain": None, "on": 20, "five": 5}[name]
        assert Sampling.from_params(params) == Sampling(0.0, 512, None, top)
        if top is None:
            assert params == {"temperature": 0.0, "max_tokens": 512}
        else:
            assert params == {
                "temperature": 0.0,
                "max_tokens": 512,
                "logprobs": True,
                "top_logprobs": top,
            }
    assert keys == {
        "plain": "3c6a3127717a44136fc1e9fd3d27d93f71898de0c2cab589cbce0e04ead4daab",
        "on": "69a97319dfc2dedd1e8dd231db84283a5acbcd2b1c363637034f936d3f0c5bdb",
        "five": "6cd3f67cc62dcd82ab53ba42f064090d54bc01d120e6be8f65f49a813207613a",
    }


def test_an_openai_o_series_model_keeps_its_key(tmp_path):
    """Per-model request rules (runner/providers/params.py) record what is not sent only for
    models that newly stop getting a parameter: o3 at api.openai.com already got none, so its
    params and key are those computed with the code before the rules went by model."""
    block = model_block(
        "o3",
        provider="openai",
        base_url="https://api.openai.com/v1",
        model="o3-2025-04-16",
        temperature=1,
        max_tokens=2048,
    )
    (model,) = load_config(write_config(tmp_path, [block])).models
    spec = TrialSpec(
        experiment="prompts",
        language="",
        coords={"id": "golden"},
        item={"id": "golden"},
        messages=({"role": "user", "content": "hi"},),
        replicate=0,
    )
    assert model.params() == {"temperature": 1.0, "max_tokens": 2048}
    assert (
        trial_key(spec, model, model.params())
        == "9bc0f11a396686665f97eb0c9b47d155be0bf911f530e00a721bffed0778e082"
    )

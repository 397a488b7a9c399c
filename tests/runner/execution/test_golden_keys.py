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
from ibias.runner.execution.plan import Trial, build_experiments, trial_key, trials_for
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
    from ibias.runner.config import ConfigFileError

    block = model_block(
        "c", provider="anthropic", base_url="https://api.anthropic.com/v1", sampling_seed=1
    )
    with pytest.raises(
        ConfigFileError, match=r"models\[0\]\.sampling_seed: Anthropic's Messages API"
    ):
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


# --- request rules by family (issue 33) -------------------------------------------------------

OPENAI = "https://api.openai.com/v1"
OPENROUTER = "https://openrouter.ai/api/v1"
GATEWAY = "https://api.example.com/v1"
LOCAL = "http://127.0.0.1:8000/v1"
ANTHROPIC = "https://api.anthropic.com/v1"
XAI = "https://api.x.ai/v1"
DEEPSEEK = "https://api.deepseek.com"
GROQ = "https://api.groq.com/openai/v1"

#: (provider, base_url, model, extra keys, key before the family rules (its first 16 hex
#: digits), key now when it changed else None), every model at temperature 1, max_tokens 512.
#: The "before" keys were computed with the code before the rule table matched names by
#: family, case-insensitively and with dotted or dashed versions. A key changes only for a
#: name that newly matches a rule (its old key recorded a parameter the real API refuses, or,
#: for `claude-opus-4-20250514`, a parameter Opus 4 takes: the old pattern read its date as a
#: minor version, so its configured temperature was never sent); `CHANGED` lists exactly those.
FAMILY_KEYS: list[tuple[str, str | None, str, dict[str, object], str, str | None]] = [
    ("openai", OPENAI, "o1", {}, "4e4944ed12636875", None),
    ("openai", OPENAI, "o1-mini", {}, "303f0efa956f46d3", None),
    ("openai", OPENAI, "o3", {}, "c053048c956f808b", None),
    ("openai", OPENAI, "o3-mini", {}, "a6d603e1c51c9961", None),
    ("openai", OPENAI, "O3-mini", {}, "9068b51d825fd75f", "5342dc1907ac27da"),
    ("openai", OPENAI, "o3-2025-04-16", {}, "22855a8d4ebe5899", None),
    ("openai", OPENAI, "o4-mini", {}, "0f2bb4dd8e403b5b", None),
    ("openai", OPENAI, "o3-pro", {}, "b4e0896f7b538b53", None),
    ("openai", OPENAI, "gpt-5", {}, "3c8007fb53d906cf", None),
    ("openai", OPENAI, "GPT-5", {}, "7336e23e8f4082b7", "7e16050becdeb91c"),
    ("openai", OPENAI, "gpt-5-mini", {}, "1d4394df07ff250e", None),
    ("openai", OPENAI, "gpt-5.1", {}, "32e27a3b76d9b0d4", None),
    ("openai", OPENAI, "gpt-5-1", {}, "56d6d8f7da4f4eab", None),
    ("openai", OPENAI, "gpt-5.2-pro", {}, "978ad93c592ace63", None),
    ("openai", OPENAI, "gpt-5-codex", {}, "51cda02ffa2daff8", None),
    ("openai", OPENAI, "gpt-5-chat-latest", {}, "fa86363bb45649dc", None),
    ("openai", OPENAI, "gpt-5.1-chat-latest", {}, "00f4ba5531a818a4", None),
    ("openai", OPENAI, "gpt-6", {}, "d8e52a1ec0f10b02", "e683bf0d36b735c4"),
    ("openai", OPENAI, "gpt-6-mini", {}, "b77e55461be19ee6", "983b58ef16938b27"),
    ("openai", OPENAI, "gpt-10", {}, "a139a199eebf29cb", "caa29050fea6ed31"),
    ("openai", OPENAI, "codex-mini-latest", {}, "311cd2a5fa1012ca", "c8bb74b1aad7b90d"),
    ("openai", OPENAI, "gpt-4o", {}, "289fa794ed4ccf51", None),
    ("openai", OPENAI, "gpt-4o-mini", {}, "f33a8cabdf910c78", None),
    ("openai", OPENAI, "gpt-4.1", {}, "a5187e17869bfe34", None),
    ("openai", OPENAI, "gpt-4.5-preview", {}, "e9acaad3e42dde2f", None),
    ("openai", OPENAI, "gpt-3.5-turbo", {}, "ae484510ff58521b", None),
    ("openai", OPENAI, "chatgpt-4o-latest", {}, "0cb4a21028e9116a", None),
    ("openai", OPENAI, "gpt-oss-120b", {}, "93ed1e92537931cb", None),
    ("openai", OPENROUTER, "openai/o3", {}, "88cf711e52116233", None),
    ("openai", OPENROUTER, "openai/O3-mini", {}, "05b954cac5b09762", "08e07b2aabfda719"),
    ("openai", OPENROUTER, "openai/gpt-5", {}, "89f1c8ad399aeabb", None),
    ("openai", OPENROUTER, "openai/gpt-6", {}, "c1bd609486723a75", "7bdc9661a733cbb9"),
    ("openai", OPENROUTER, "openai/gpt-4o", {}, "f0e6902c5a97eb72", None),
    ("openai", OPENROUTER, "anthropic/claude-opus-4.7", {}, "ca079fff3af62211", "8f68775257025ec7"),
    ("openai", OPENROUTER, "anthropic/claude-sonnet-4.5", {}, "618efc8bb2d0e0ed", None),
    ("openai", OPENROUTER, "meta-llama/llama-3.1-8b-instruct", {}, "dc0c37f15df64798", None),
    ("openai", GATEWAY, "o3-mini", {}, "59ca2a6e37ead0c8", None),
    ("openai", GATEWAY, "gpt-6", {}, "d8e52a1ec0f10b02", "e683bf0d36b735c4"),
    ("openai", GATEWAY, "my-deployment", {"reasoning": True}, "b9b6f2c2d71406a7", None),
    ("openai", GATEWAY, "my-deployment", {}, "3bc257ece1a055ad", None),
    ("openai", LOCAL, "o3-mini", {"reasoning": False}, "a6d603e1c51c9961", None),
    ("openai", LOCAL, "O3-mini", {"reasoning": False}, "9068b51d825fd75f", None),
    ("openai", LOCAL, "gpt-6", {"reasoning": False}, "d8e52a1ec0f10b02", None),
    ("openai", LOCAL, "llama-3.1-8b", {}, "4e1816264d101cbc", None),
    ("openai", LOCAL, "gpt-4o", {"send_temperature": False}, "9aabd34354104e11", None),
    ("openai", OPENAI, "gpt-5", {"send_temperature": True}, "3c8007fb53d906cf", None),
    ("openai", XAI, "grok-4", {}, "88d7e372a238c442", None),
    ("openai", XAI, "grok-3-mini", {}, "c0efab4fe0cc715e", None),
    ("openai", XAI, "grok-3", {}, "2bfc9087139f0fe6", None),
    ("openai", DEEPSEEK, "deepseek-reasoner", {}, "e980a2a90178cf02", None),
    ("openai", DEEPSEEK, "DeepSeek-Reasoner", {}, "5ce8b2eae303d29e", "4dbad4245a126680"),
    ("openai", DEEPSEEK, "deepseek-chat", {}, "87dabde78a18c22b", None),
    ("openai", GROQ, "openai/gpt-oss-20b", {}, "0f30c2104437509a", None),
    ("anthropic", ANTHROPIC, "claude-opus-4-7", {}, "7c20b71b427c0260", None),
    ("anthropic", ANTHROPIC, "claude-opus-4.7", {}, "d06f46a7fc2de687", "6d6bb004cab23a14"),
    ("anthropic", ANTHROPIC, "Claude-Opus-4-7", {}, "db78be15a7d35412", "92d11c67b11ebc43"),
    ("anthropic", ANTHROPIC, "claude-opus-4-7-20260416", {}, "5e2834587a3b88b7", None),
    ("anthropic", ANTHROPIC, "claude-opus-4-8", {}, "2a0c14eacd32a14a", None),
    ("anthropic", ANTHROPIC, "claude-4.7-opus", {}, "ff88aad5d59677b1", "0305fd98a54f4005"),
    ("anthropic", ANTHROPIC, "us.anthropic.claude-opus-4-7-v1:0", {}, "1e74a2edfde02054", None),
    ("anthropic", ANTHROPIC, "claude-opus-4-20250514", {}, "d687ca853cd7919b", "443d836d4c5670f9"),
    ("anthropic", ANTHROPIC, "claude-opus-4-0", {}, "2a00366d9d9ca0a8", None),
    ("anthropic", ANTHROPIC, "claude-opus-4-1-20250805", {}, "d97f77d4800d706e", None),
    ("anthropic", ANTHROPIC, "claude-opus-4-6", {}, "157b8aee876a0555", None),
    ("anthropic", ANTHROPIC, "claude-sonnet-4-20250514", {}, "5675fc0617d94d65", None),
    ("anthropic", ANTHROPIC, "claude-sonnet-4-5", {}, "2581293387012210", None),
    ("anthropic", ANTHROPIC, "claude-sonnet-4.5", {}, "9d677a99978f65e8", None),
    ("anthropic", ANTHROPIC, "claude-haiku-4-5-20251001", {}, "0dab3fecfd3f4c2f", None),
    ("anthropic", ANTHROPIC, "claude-3-5-sonnet-20241022", {}, "cbe054cf1477421e", None),
    ("anthropic", ANTHROPIC, "claude-3-7-sonnet-latest", {}, "5ed8cf4acf981533", None),
    ("anthropic", ANTHROPIC, "claude-sonnet-5", {}, "0dc3220749595d29", None),
    ("anthropic", ANTHROPIC, "claude-mythos-5", {}, "ef2149159defc995", "4d8d7ef04c511616"),
    ("anthropic", ANTHROPIC, "claude-mythos-5.1", {}, "d6be7b44f77b2c8b", "8dadea2785ea3166"),
    (
        "anthropic",
        ANTHROPIC,
        "claude-opus-4-7",
        {"send_temperature": True},
        "169b05193e0b9efe",
        None,
    ),
    (
        "anthropic",
        ANTHROPIC,
        "claude-sonnet-4-5",
        {"send_temperature": False},
        "a39bb86f57a1a0fe",
        None,
    ),
    ("gemini", None, "gemini-2.5-flash", {}, "595886d5d7d45cde", None),
    ("simulator", None, "sim-1", {}, "60b2971258c44bb0", None),
]

CHANGED = {
    "O3-mini",  # case
    "GPT-5",
    "gpt-6",  # later numbers of a family
    "gpt-6-mini",
    "gpt-10",
    "codex-mini-latest",  # codex-*
    "openai/O3-mini",
    "openai/gpt-6",
    "anthropic/claude-opus-4.7",  # Claude behind an OpenAI-compatible gateway, dotted
    "DeepSeek-Reasoner",
    "claude-opus-4.7",  # dotted
    "Claude-Opus-4-7",
    "claude-4.7-opus",  # version first, as OpenRouter writes it
    "claude-opus-4-20250514",  # Opus 4: a date is no minor version; it takes temperature
    "claude-mythos-5",  # every Claude family from 5, named in the table or not
    "claude-mythos-5.1",
}


def test_only_names_that_newly_match_a_family_rule_change_their_key(tmp_path):
    changed: set[str] = set()
    for i, (provider, base_url, name, extra, before, now) in enumerate(FAMILY_KEYS):
        keys: dict[str, object] = {
            "provider": provider,
            "model": name,
            "temperature": 1.0,
            "max_tokens": 512,
            **extra,
        }
        if base_url is not None:
            keys["base_url"] = base_url
        folder = tmp_path / str(i)
        folder.mkdir()
        (model,) = load_config(write_config(folder, [model_block("m", **keys)])).models
        key = trial_key(_hand_spec(), model, model.params())
        if now is None:
            assert key[:16] == before, (provider, base_url, name, extra)
        else:
            assert key[:16] == now and now != before, (provider, base_url, name, extra)
            changed.add(name)
    assert changed == CHANGED

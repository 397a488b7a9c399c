"""Config validation: every key checked, errors name the file, the key path and what was
expected, and nothing but ConfigError ever escapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.runner.config import ConfigError, parse_config
from ibias.runner.run import check_keys

PATH = Path("cfg.toml")
MODEL = '[[models]]\nid = "m"\nprovider = "openai"\nbase_url = "https://api.example.com/v1"\n'


def config_text(tmp_path: Path, model_extra: str = "", run: str = "") -> str:
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    return f'[run]\n{run}\n{MODEL}{model_extra}\n[experiments.prompts]\nfile = "p.jsonl"\n'


def parse(text: str, tmp_path: Path):
    return parse_config(text, tmp_path / PATH)


def test_defaults_and_values(tmp_path):
    cfg = parse(config_text(tmp_path, "rpm = 10\ntpm = 1000\nprice_input = 0.5\n"), tmp_path)
    m = cfg.models[0]
    assert (m.id, m.provider, m.model, m.rpm, m.tpm) == ("m", "openai", "m", 10, 1000)
    assert m.base_url == "https://api.example.com/v1"
    assert m.params() == {"temperature": 0.0, "max_tokens": 512}
    assert cfg.run.seed == 0 and cfg.run.name == "cfg"
    assert m.cost(1_000_000, 0) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("extra", "key", "expected"),
    [
        ("rpm = -1\n", "models[0].rpm", "positive integer"),
        ("rpm = 0\n", "models[0].rpm", "positive integer"),
        ("tpm = 1.5\n", "models[0].tpm", "positive integer"),
        ("max_concurrency = true\n", "models[0].max_concurrency", "positive integer"),
        ("timeout_s = 0\n", "models[0].timeout_s", "positive number"),
        ("temperature = -0.1\n", "models[0].temperature", ">= 0"),
        ('api_key_env = "sk-abc def"\n', "models[0].api_key_env", "variable name"),
        ("colour = 1\n", "models[0].colour", "unknown key"),
        ("price_output = nan\n", "models[0].price_output", ">= 0"),
    ],
)
def test_bad_model_values_name_the_key(tmp_path, extra, key, expected):
    with pytest.raises(ConfigError) as err:
        parse(config_text(tmp_path, extra), tmp_path)
    message = str(err.value)
    assert message.startswith(str(tmp_path / PATH))
    assert key in message and expected in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "url", ["ftp://x/v1", "api.openai.com/v1", "http://", "https://host:notaport/v1", ""]
)
def test_bad_urls(tmp_path, url):
    text = config_text(tmp_path).replace("https://api.example.com/v1", url)
    with pytest.raises(ConfigError, match=r"models\[0\]\.base_url"):
        parse(text, tmp_path)


def test_duplicate_ids_unknown_tables_and_experiments(tmp_path):
    text = config_text(tmp_path) + MODEL
    with pytest.raises(ConfigError, match=r"models\[1\]\.id: duplicate model id 'm'"):
        parse(text, tmp_path)
    with pytest.raises(ConfigError, match=r": extra: unknown key"):
        parse(config_text(tmp_path) + "[extra]\na = 1\n", tmp_path)
    with pytest.raises(ConfigError, match=r"experiments\.nope: unknown experiment"):
        parse(config_text(tmp_path) + "[experiments.nope]\na = 1\n", tmp_path)
    with pytest.raises(ConfigError, match=r"run\.speed: unknown key"):
        parse(config_text(tmp_path, run="speed = 3"), tmp_path)


def test_experiment_errors_carry_the_table_path(tmp_path):
    text = config_text(tmp_path).replace('file = "p.jsonl"', 'file = "p.jsonl"\nreplicates = 0')
    with pytest.raises(ConfigError, match=r"experiments\.prompts\.replicates: expected an integer"):
        parse(text, tmp_path)
    (tmp_path / "p.jsonl").write_text('{"id": 1, "messages": []}\n')
    with pytest.raises(ConfigError, match=r"line 1: 'messages' must be a non-empty array"):
        parse(text.replace("\nreplicates = 0", ""), tmp_path)


def test_unimplemented_provider_says_so(tmp_path):
    text = config_text(tmp_path).replace('provider = "openai"', 'provider = "gemini"')
    with pytest.raises(ConfigError, match="not implemented yet"):
        parse(text, tmp_path)


def test_simulator_sim_table_is_validated(tmp_path):
    text = (
        '[[models]]\nid = "s"\nprovider = "simulator"\n[models.sim]\nword_bias = 3\n'
        '\n[experiments.prompts]\nfile = "p.jsonl"\n'
    )
    config_text(tmp_path)
    with pytest.raises(ConfigError, match=r"models\[0\]\.sim\.word_bias"):
        parse(text, tmp_path)


def test_missing_key_variable_only_matters_for_run(tmp_path):
    cfg = parse(config_text(tmp_path, 'api_key_env = "IBIAS_NOPE"\n'), tmp_path)
    with pytest.raises(ConfigError, match="IBIAS_NOPE is not set"):
        check_keys(cfg, {})
    assert check_keys(cfg, {"IBIAS_NOPE": "k"}) == {"m": "k"}


KEYS = [
    "rpm",
    "tpm",
    "max_concurrency",
    "timeout_s",
    "temperature",
    "max_tokens",
    "sampling_seed",
    "price_input",
    "price_output",
    "model",
    "api_key_env",
    "id",
]
toml_values = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.booleans().map(lambda b: "true" if b else "false"),
    st.text(alphabet=st.characters(codec="ascii", exclude_characters='"\\\n\r'), max_size=12).map(
        lambda s: f'"{s}"'
    ),
    st.just("[1, 2]"),
    st.just("{ a = 1 }"),
)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(KEYS), value=toml_values)
def test_any_value_parses_or_fails_with_a_one_line_config_error(tmp_path_factory, key, value):
    tmp_path = tmp_path_factory.mktemp("cfg")
    base = config_text(tmp_path)
    if key == "id":
        text = base.replace('id = "m"', f"id = {value}")
    else:
        text = base.replace('provider = "openai"\n', f'provider = "openai"\n{key} = {value}\n')
    try:
        cfg = parse(text, tmp_path)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        assert f"models[0].{key}" in str(exc) or "TOML" in str(exc)
    else:
        assert len(cfg.models) == 1

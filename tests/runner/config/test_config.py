"""Config validation: every key checked against its schema, errors name the file, the full key
path, what was expected and what was given, on one line, and nothing but ConfigFileError ever
escapes parse_config."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibias.prompts.schema import render_path
from ibias.runner.cli import main
from ibias.runner.config import CREDENTIAL_PARAMS, ConfigFileError, parse_config
from ibias.runner.execution.run import check_keys

PATH = Path("cfg.toml")
MODEL = '[[models]]\nid = "m"\nprovider = "openai"\nbase_url = "https://api.example.com/v1"\n'


def config_text(tmp_path: Path, model_extra: str = "", run: str = "") -> str:
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    return f'[run]\n{run}\n{MODEL}{model_extra}\n[experiments.prompts]\nfile = "p.jsonl"\n'


def parse(text: str, tmp_path: Path):
    return parse_config(text, tmp_path / PATH)


def error(text: str, tmp_path: Path) -> str:
    with pytest.raises(ConfigFileError) as err:
        parse(text, tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / PATH}: ")
    assert "\n" not in message
    return message[len(f"{tmp_path / PATH}: ") :]


def test_defaults_and_values(tmp_path):
    cfg = parse(config_text(tmp_path, "rpm = 10\ntpm = 1000\nprice_input = 0.5\n"), tmp_path)
    m = cfg.models[0]
    assert (m.id, m.provider, m.model, m.rpm, m.tpm) == ("m", "openai", "m", 10, 1000)
    assert m.base_url == "https://api.example.com/v1"
    assert m.params() == {"temperature": 0.0, "max_tokens": 512}
    assert (m.max_concurrency, m.timeout_s, m.sampling_seed, m.api_key_env) == (
        16,
        60.0,
        None,
        None,
    )
    assert cfg.run.seed == 0 and cfg.run.name == "cfg" and cfg.run.store is None
    assert m.cost(1_000_000, 0) == pytest.approx(0.5)


def test_numbers_keep_their_types_so_trial_keys_do_not_change(tmp_path):
    """An integer temperature or timeout becomes a float, as before the schemas (the sampling
    parameters are hashed into every trial key)."""
    cfg = parse(
        config_text(tmp_path, "temperature = 1\ntimeout_s = 5\nsampling_seed = 7\n"), tmp_path
    )
    m = cfg.models[0]
    assert m.params() == {"temperature": 1.0, "max_tokens": 512, "seed": 7}
    assert type(m.temperature) is float and type(m.timeout_s) is float
    assert type(m.max_tokens) is int and type(m.sampling_seed) is int


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("rpm = -1", "models[0].rpm: expected an integer from 1 to 1,000,000,000 (requests per"),
        ("rpm = 0", "models[0].rpm: expected an integer from 1 to 1,000,000,000"),
        ("tpm = 1.5", "models[0].tpm: expected an integer from 1 to 1,000,000,000 (tokens per"),
        ("max_concurrency = true", "models[0].max_concurrency: expected an integer from 1 to"),
        ("timeout_s = 0", "models[0].timeout_s: expected a number > 0 and <= 3,600 (seconds)"),
        ("temperature = -0.1", "models[0].temperature: expected a number from 0 to 2, got -0.1"),
        ('api_key_env = "sk-abc def"', "models[0].api_key_env: expected an environment variable"),
        ("colour = 1", "models[0].colour: unknown key (expected one of id, provider, base_url"),
        ("price_output = nan", "models[0].price_output: expected a number from 0 to 100,000"),
        ('model = "  "', "models[0].model: expected a non-empty string, got '  '"),
        # every provider's model takes a [models.sim] (rehearsals), checked as the simulator's
        ("sim = { word_bias = 3 }", "models[0].sim.word_bias: expected a number from 0 to 1"),
    ],
)
def test_bad_model_values_name_the_key(tmp_path, extra, expected):
    assert error(config_text(tmp_path, extra + "\n"), tmp_path).startswith(expected)


# Each bound: the largest (or smallest) value accepted, and the first one rejected.
BOUNDS = [
    ("max_concurrency", "10000", "10001", "expected an integer from 1 to 10,000, got 10001"),
    ("max_concurrency", "1", "0", "expected an integer from 1 to 10,000, got 0"),
    ("rpm", "1000000000", "1000000001", "1,000,000,000 (requests per minute), got 1000000001"),
    ("tpm", "1000000000", "1000000001", "1,000,000,000 (tokens per minute), got 1000000001"),
    ("temperature", "2", "2.000001", "expected a number from 0 to 2, got 2.000001"),
    ("temperature", "0", "-1e-9", "expected a number from 0 to 2, got -1e-09"),
    ("timeout_s", "3600", "3600.5", "expected a number > 0 and <= 3,600 (seconds), got 3600.5"),
    ("timeout_s", "0.001", "-1", "expected a number > 0 and <= 3,600 (seconds), got -1"),
    ("timeout_s", "0.001", "inf", "expected a number > 0 and <= 3,600 (seconds), got inf"),
    ("max_tokens", "1000000", "1000001", "expected an integer from 1 to 1,000,000, got 1000001"),
    ("max_tokens", "1", "0", "expected an integer from 1 to 1,000,000, got 0"),
    (
        "sampling_seed",
        "9007199254740992",
        "9007199254740993",
        "from 0 to 2^53, got 9007199254740993",
    ),
    ("sampling_seed", "0", "-1", "expected an integer from 0 to 2^53, got -1"),
    ("price_input", "100000", "100001", "from 0 to 100,000 (USD per million tokens), got 100001"),
    ("price_output", "0", "-0.01", "from 0 to 100,000 (USD per million tokens), got -0.01"),
    ("price_output", "0", "inf", "(USD per million tokens), got inf"),
    ("outage_limit_s", "604800", "604801", "> 0 and <= 604,800 (seconds), got 604801"),
    ("outage_limit_s", "0.5", "0", "> 0 and <= 604,800 (seconds), got 0"),
]


@pytest.mark.parametrize(("key", "ok", "bad", "expected"), BOUNDS)
def test_model_bounds(tmp_path, key, ok, bad, expected):
    parse(config_text(tmp_path, f"{key} = {ok}\n"), tmp_path)
    message = error(config_text(tmp_path, f"{key} = {bad}\n"), tmp_path)
    assert message.startswith(f"models[0].{key}: expected ") and message.endswith(expected)


def test_grace_and_outage_limit_default_and_bounds(tmp_path):
    cfg = parse(config_text(tmp_path, ""), tmp_path)
    assert (cfg.run.grace_s, cfg.models[0].outage_limit_s) == (10.0, 600.0)
    cfg = parse(config_text(tmp_path, "outage_limit_s = 30\n", run="grace_s = 0"), tmp_path)
    assert (cfg.run.grace_s, cfg.models[0].outage_limit_s) == (0.0, 30.0)
    assert error(config_text(tmp_path, run="grace_s = 3601"), tmp_path) == (
        "run.grace_s: expected a number from 0 to 3,600 (seconds), got 3601"
    )


def test_max_concurrency_of_a_hundred_million_is_one_line_not_3_gb(tmp_path):
    assert error(config_text(tmp_path, "max_concurrency = 100000000\n"), tmp_path) == (
        "models[0].max_concurrency: expected an integer from 1 to 10,000, got 100000000"
    )


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("run.seed", "[run]\nseed = 12345678901234567890123\n"),
        ("models[0].rpm", "rpm = 12345678901234567890123\n"),
        ("models[0].sampling_seed", "sampling_seed = -12345678901234567890123\n"),
        ("models[0].price_input", "price_input = 12345678901234567890123\n"),
        ("experiments.prompts.replicates", "replicates = 12345678901234567890123\n"),
    ],
)
def test_a_23_digit_integer_is_rejected_with_its_key(tmp_path, where, text):
    base = config_text(tmp_path)
    if where == "run.seed":
        full = base.replace("[run]\n", text)
    elif where.startswith("experiments"):
        full = base + text
    else:
        full = base.replace('provider = "openai"\n', 'provider = "openai"\n' + text)
    message = error(full, tmp_path)
    assert message.startswith(f"{where}: expected ")
    assert message.endswith("12345678901234567890123")


def test_run_table(tmp_path):
    cfg = parse(
        config_text(tmp_path, run='name = "x"\nseed = 9007199254740992\nstore = "a.db"'), tmp_path
    )
    assert (cfg.run.name, cfg.run.seed, cfg.run.store) == ("x", 2**53, "a.db")
    assert error(config_text(tmp_path, run="seed = -1"), tmp_path) == (
        "run.seed: expected an integer from 0 to 2^53, got -1"
    )
    assert error(config_text(tmp_path, run='name = ""'), tmp_path).startswith("run.name: expected")
    assert error("run = 3\n" + MODEL, tmp_path) == "run: expected a table, got 3"


def test_an_integer_too_long_for_python_is_a_toml_error(tmp_path):
    text = config_text(tmp_path, "rpm = " + "1" * 5000 + "\n")
    assert error(text, tmp_path).startswith("not valid TOML: ")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x/v1",
        "api.openai.com/v1",
        "http://",
        "https://host:notaport/v1",
        "",
        "https://h:99999",
    ],
)
def test_bad_urls(tmp_path, url):
    text = config_text(tmp_path).replace("https://api.example.com/v1", url)
    assert error(text, tmp_path).startswith(
        "models[0].base_url: expected an http(s) URL such as 'https://api.openai.com/v1', got "
    )


def test_missing_keys(tmp_path):
    text = config_text(tmp_path)
    assert error(text.replace('id = "m"\n', ""), tmp_path).startswith(
        "models[0].id: missing (expected a model id"
    )
    # openai, anthropic and gemini default to their provider's documented URL
    native = parse(text.replace('base_url = "https://api.example.com/v1"\n', ""), tmp_path)
    assert native.models[0].base_url is None
    assert error("[run]\n", tmp_path) == "models: missing (expected an array of [[models]] tables)"
    assert error(MODEL, tmp_path).startswith("experiments: missing (expected an [experiments]")
    assert error(MODEL + "[experiments]\n", tmp_path).startswith(
        "experiments: no experiments configured"
    )
    assert error("models = []\n", tmp_path).startswith("models: expected an array of [[models]]")


def test_duplicate_ids_unknown_tables_and_experiments(tmp_path):
    text = config_text(tmp_path) + MODEL
    assert error(text, tmp_path) == "models[1].id: duplicate model id 'm' (also models[0])"
    assert error(config_text(tmp_path) + "[extra]\na = 1\n", tmp_path).startswith(
        "extra: unknown key (expected one of run, models, experiments)"
    )
    assert error(config_text(tmp_path) + "[experiments.nope]\na = 1\n", tmp_path).startswith(
        "experiments.nope: unknown experiment; expected one of "
        "word_association, allocation, prompts"
    )
    assert error(config_text(tmp_path, run="speed = 3"), tmp_path) == (
        "run.speed: unknown key (expected one of name, seed, store, grace_s); did you mean `seed`?"
    )
    assert error(config_text(tmp_path) + '[experiments."a b"]\n', tmp_path).startswith(
        'experiments."a b": unknown experiment'
    )


def test_experiment_errors_carry_the_table_path(tmp_path):
    text = config_text(tmp_path).replace('file = "p.jsonl"', 'file = "p.jsonl"\nreplicates = 0')
    assert error(text, tmp_path) == (
        "experiments.prompts.replicates: expected an integer from 1 to 10,000, got 0"
    )
    assert error(text.replace("replicates = 0", "replicates = 10001"), tmp_path).endswith("10001")
    assert error(text.replace("replicates = 0", "repl = 1"), tmp_path) == (
        "experiments.prompts.repl: unknown key (expected one of file, replicates)"
    )
    (tmp_path / "p.jsonl").write_text('{"id": 1, "messages": []}\n')
    assert error(text.replace("\nreplicates = 0", ""), tmp_path).endswith(
        "line 1: 'messages' must be a non-empty array"
    )
    long_name = text.replace('"p.jsonl"', '"' + "x" * 5000 + '"').replace("\nreplicates = 0", "")
    assert error(long_name, tmp_path).startswith("experiments.prompts.file: ")


def test_paper_experiment_errors_carry_the_full_path(tmp_path):
    base = MODEL + "[experiments.allocation]\n"
    assert error(base + 'languages = ["en", "fr"]\n', tmp_path) == (
        "experiments.allocation.languages[1]: expected one of 'en', 'es', got 'fr'"
    )
    assert error(base + "pairs_per_service = 100001\n", tmp_path) == (
        "experiments.allocation.pairs_per_service: expected an integer from 0 to 100,000, "
        "got 100001"
    )
    wa = MODEL + "[experiments.word_association]\n"
    assert error(wa + 'labels = { es = { traget = "x" } }\n', tmp_path).startswith(
        "experiments.word_association.labels.es.traget: unknown key"
    )
    assert error(wa + 'categories = ["risk", "astrology"]\n', tmp_path).startswith(
        "experiments.word_association.categories[1]: unknown category 'astrology'"
    )


def test_unknown_provider_names_the_known_ones(tmp_path):
    text = config_text(tmp_path).replace('provider = "openai"', 'provider = "acme"')
    # any registered provider is accepted (entry points included); else the known ones named
    assert error(text, tmp_path) == (
        "models[0].provider: no provider registered as 'acme'; use one of anthropic, gemini, "
        "llamacpp, openai, simulator"
    )


SIMS = '[[models]]\nid = "s{i}"\nprovider = "simulator"\n'


@pytest.mark.parametrize(
    ("sim", "expected"),
    [
        ("word_bias = 3", "models[2].sim.word_bias: expected a number from 0 to 1, got 3"),
        (
            "allocation_cis = { gynecology = 1.5 }",
            "models[2].sim.allocation_cis.gynecology: expected a number from 0 to 1, got 1.5",
        ),
        ("faults = { teapot = 0.1 }", "models[2].sim.faults.teapot: unknown key (expected one of"),
        ("faults = { 500 = 0.6, 503 = 0.6 }", "models[2].sim.faults: rates add up to 1.2"),
        ("fault_rate = 0.1\nfaults = {}", "models[2].sim.fault_rate: give either"),
        ("rpm = 1000000001", "models[2].sim.rpm: expected an integer from 1 to 1,000,000,000"),
        ("fatal_status = 500", "models[2].sim.fatal_status: expected one of 400, 401, 402,"),
        ("latency = 3", "models[2].sim.latency: unknown key (expected one of word_bias,"),
        ("hang_s = 0", "models[2].sim.hang_s: expected a number > 0 and <= 3,600 (seconds), got 0"),
    ],
)
def test_simulator_sim_table_is_validated(tmp_path, sim, expected):
    config_text(tmp_path)
    text = (
        "".join(SIMS.format(i=i) for i in range(2))
        + SIMS.format(i=2)
        + f'[models.sim]\n{sim}\n\n[experiments.prompts]\nfile = "p.jsonl"\n'
    )
    assert error(text, tmp_path).startswith(expected)


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("https://user:s3cr3t-value@api.example.com/v1", "user info"),
        ("https://s3cr3t-value@api.example.com", "user info"),
        ("https://s3cr3t-value:@api.example.com:8443/v1", "user info"),
        ("https://api.example.com/v1?key=s3cr3t-value", "query parameter 'key'"),
        ("https://api.example.com/v1?KEY=s3cr3t-value", "query parameter 'key'"),
        ("https://api.example.com/v1?api_key=s3cr3t-value", "query parameter 'api_key'"),
        ("https://api.example.com/v1?a=1&Api-Key=s3cr3t-value", "query parameter 'api-key'"),
        ("https://api.example.com/v1?access_token=s3cr3t-value", "query parameter 'access_token'"),
        ("https://api.example.com/v1?Token=s3cr3t-value", "query parameter 'token'"),
        ("https://api.example.com/v1?%6Bey=s3cr3t-value", "query parameter 'key'"),
        ("https://u:s3cr3t-value@[::1/v1", "user info"),  # a bad host too: still not echoed
        ("ftp://u:s3cr3t-value@host/v1", "user info"),  # a bad scheme too: still not echoed
    ],
)
def test_credentials_in_base_url_are_refused_without_echoing_them(tmp_path, url, part):
    """Keys belong in api_key_env: a URL is stored as written with the config (runs.config)."""
    text = config_text(tmp_path).replace("https://api.example.com/v1", url)
    line = error(text, tmp_path)
    assert line.startswith(
        f"models[0].base_url: base_url of model 'm' carries credentials ({part})"
    )
    assert "api_key_env" in line
    assert "s3cr3t" not in line


SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=40)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=SECRET,
    shape=st.sampled_from(
        [
            "https://u:SECRET-{s}@api.example.com/v1",
            "https://SECRET-{s}@api.example.com/v1",
            "http://SECRET-{s}:x@127.0.0.1:8000",
            "https://api.example.com/v1?a=b&{k}=SECRET-{s}",
            "https://api.example.com/v1?{k}=SECRET-{s}#frag",
        ]
    ),
    name=st.sampled_from(sorted(CREDENTIAL_PARAMS)).flatmap(
        lambda n: st.sampled_from([n, n.upper(), n.title()])
    ),
)
def test_any_credentials_in_base_url_are_refused_and_never_shown(tmp_path, secret, shape, name):
    url = shape.format(s=secret, k=name)
    text = config_text(tmp_path).replace("https://api.example.com/v1", url)
    line = error(text, tmp_path)
    assert "carries credentials" in line and "SECRET" not in line, line


@pytest.mark.parametrize(
    "url",
    [
        "https://example.openai.azure.com/openai/v1?api-version=2024-10-21",
        "https://api.example.com/v1?monkey=1&tokens=2",
        "https://api.example.com/v1/key/token",
        "https://api.example.com/v1#key=x",
    ],
)
def test_urls_without_credentials_stay_accepted(tmp_path, url):
    text = config_text(tmp_path).replace("https://api.example.com/v1", url)
    assert parse(text, tmp_path).models[0].base_url == url.rstrip("/")


def test_a_refused_base_url_is_never_stored(tmp_path, capsys):
    """Through the command line: exit 2, one line, no store made, no secret printed."""
    path = tmp_path / "c.toml"
    url = "https://user:s3cr3t-value@api.example.com/v1"
    path.write_text(config_text(tmp_path).replace("https://api.example.com/v1", url))
    store = tmp_path / "s.duckdb"
    assert main(["run", str(path), "--store", str(store)]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "s3cr3t" not in out + err
    assert "carries credentials (user info)" in err
    assert not store.exists()


def test_missing_key_variable_only_matters_for_run(tmp_path):
    cfg = parse(config_text(tmp_path, 'api_key_env = "IBIAS_NOPE"\n'), tmp_path)
    with pytest.raises(ConfigFileError, match="IBIAS_NOPE is not set"):
        check_keys(cfg, {})
    assert check_keys(cfg, {"IBIAS_NOPE": "k"}) == {"m": "k"}


def test_plan_says_it_in_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(config_text(tmp_path, "max_concurrency = 100000000\n"))
    assert main(["plan", str(path), "--store", str(tmp_path / "s.duckdb")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"{path}: models[0].max_concurrency: expected an integer from 1 to 10,000" in err


# --- any config: a Config or one line naming the file and a key path --------------------------

BASE: dict[str, Any] = {
    "run": {"name": "fuzz", "seed": 1, "store": "x.duckdb"},
    "models": [
        {
            "id": "m",
            "provider": "openai",
            "base_url": "https://api.example.com/v1",
            "model": "gpt",
            "api_key_env": "KEY",
            "rpm": 10,
            "tpm": 1000,
            "max_concurrency": 4,
            "timeout_s": 30,
            "temperature": 0.5,
            "max_tokens": 64,
            "sampling_seed": 3,
            "price_input": 0.1,
            "price_output": 0.2,
        },
        {
            "id": "s",
            "provider": "simulator",
            "sim": {
                "word_bias": 0.6,
                "allocation_cis": {"gynecology": 0.7},
                "faults": {"500": 0.01},
                "latency_ms": 1,
                "rpm": 100,
            },
        },
    ],
    "experiments": {
        "prompts": {"file": "p.jsonl", "replicates": 2},
        "word_association": {
            "languages": ["en"],
            "categories": ["risk"],
            "trials_per_category": 2,
            "explicit_per_category": 1,
            "words_per_sentiment": 3,
            "bias_smoothing": 0.01,
            "target": "transgender",
            "labels": {"es": {"target": "trans"}},
        },
        "allocation": {
            "languages": ["en"],
            "services": ["gynecology"],
            "roster_size": 40,
            "pairs_per_service": 3,
            "explanation": [True],
            "symptoms": ["none"],
            "explicit_per_service": 1,
            "same_age_band": True,
            "age_bands": [[18, 40], [41, 80]],
            "pairing": {"gynecology": {"same_age_band": False}},
        },
    },
}


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*path, i)))
    return out


PATHS = _paths(BASE)[1:]


def _get(value: Any, path: tuple) -> Any:
    for part in path:
        value = value[part]
    return value


def _toml(value: Any) -> str:
    """An inline TOML value (enough for any JSON-like value plus dates)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"


def to_toml(doc: dict[str, Any]) -> str:
    return "".join(f"{_toml(str(k))} = {_toml(v)}\n" for k, v in doc.items())


text_values = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
scalars = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 1, 10**23, -(10**23), 2**53, 2**53 + 1, 100_000_000, 10_001, 2**64]),
    st.floats(),
    st.booleans(),
    text_values,
    st.sampled_from(["en", "all", "none", "gynecology", "risk", "openai", "simulator", "p.jsonl"]),
    st.dates(min_value=datetime.date(1900, 1, 1), max_value=datetime.date(2100, 1, 1)),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text_values, inner, max_size=3),
    max_leaves=6,
)
mutations = st.lists(
    st.tuples(
        st.sampled_from(PATHS),
        st.sampled_from(["replace", "delete", "add"]),
        text_values,
        values,
    ),
    min_size=1,
    max_size=3,
)

SEGMENT = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*")'
KEY_PATH = re.compile(rf"({SEGMENT})(?:\.{SEGMENT}|\[\d+\])*: ")


def _has(parent: Any, part: str | int) -> bool:
    if isinstance(parent, dict):
        return part in parent
    return isinstance(parent, list) and isinstance(part, int) and part < len(parent)


def _mutate(doc: Any, mutation: tuple) -> tuple:
    """Apply one change in place (if its path still exists); the path it touched."""
    path, kind, key, value = mutation
    parent = doc
    for part in path[:-1]:
        if not _has(parent, part):
            return ()
        parent = parent[part]
    last = path[-1]
    if not _has(parent, last):
        return ()
    if kind == "delete":
        del parent[last]
    elif kind == "add" and isinstance(parent[last], dict):
        parent[last][key] = value
        return (*path, key)
    else:
        parent[last] = value
    return path


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(changes=mutations)
def test_any_config_parses_or_fails_with_one_line_naming_the_file_and_a_key_path(tmp_path, changes):
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    doc = json.loads(json.dumps(BASE))
    touched = [_mutate(doc, change) for change in changes]
    path = tmp_path / "fuzz.toml"
    try:
        cfg = parse_config(to_toml(doc), path)
    except ConfigFileError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message
        assert message.startswith(f"{path}: ")
        rest = message[len(f"{path}: ") :]
        found = KEY_PATH.match(rest)
        assert found, rest
        # the path starts at a top-level table or at a key the changes added
        assert found.group(1) in {"run", "models", "experiments"} | {
            render_path(t[:1]) for t in touched if t
        }, rest
    else:
        assert cfg.models and cfg.built


def test_the_fuzz_base_config_is_valid(tmp_path):
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    cfg = parse_config(to_toml(BASE), tmp_path / "fuzz.toml")
    assert [m.id for m in cfg.models] == ["m", "s"]
    assert {e.name for e in cfg.built} >= {"prompts", "word_association", "allocation"}


# Tables whose keys are names: a new key is a new entry, which may well be valid.
FREE_KEYS = {
    ("experiments",),
    ("models", 1, "sim", "allocation_cis"),
    ("experiments", "word_association", "labels"),
    ("experiments", "allocation", "pairing"),
}
KNOWN = {"target", "reference", "same_age_band", "cis", "trans", "hang", "drop", "malformed"}


def _tables(value: Any, path: tuple = ()) -> list[tuple]:
    return [p for p in _paths(value, path) if isinstance(_get(BASE, p), dict)]


@pytest.mark.parametrize(
    "table",
    [t for t in _tables(BASE) if t not in FREE_KEYS and "pairing" not in t],
    ids=lambda t: ".".join(map(str, t)) or "top",
)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=text_values.filter(lambda k: k not in KNOWN), value=values)
def test_an_unknown_key_at_any_level_is_named_with_its_full_path(tmp_path, table, key, value):
    """A pairing rule is one unit: an unknown key in it is reported on the rule."""
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    doc = json.loads(json.dumps(BASE))
    target = _get(doc, table)
    if key in target:
        return
    target[key] = value
    path = tmp_path / "fuzz.toml"
    with pytest.raises(ConfigFileError) as err:
        parse_config(to_toml(doc), path)
    where = render_path([*table, key]) if table else render_path([key])
    assert str(err.value).startswith(f"{path}: {where}: "), str(err.value)


def test_gemini_options_are_checked_and_only_for_gemini(tmp_path):
    gemini = config_text(tmp_path).replace('provider = "openai"', 'provider = "gemini"')
    ok = gemini.replace(
        'provider = "gemini"',
        'provider = "gemini"\nthinking_budget = 0\n'
        'safety_settings = { HARM_CATEGORY_HATE_SPEECH = "BLOCK_NONE" }',
    )
    model = parse(ok, tmp_path).models[0]
    assert model.options == {
        "thinking_budget": 0,
        "safety_settings": {"HARM_CATEGORY_HATE_SPEECH": "BLOCK_NONE"},
    }
    both = gemini.replace(
        'provider = "gemini"', 'provider = "gemini"\nthinking_budget = 0\nthinking_level = "low"'
    )
    assert "models[0].thinking_level" in error(both, tmp_path)
    bad = gemini.replace('provider = "gemini"', 'provider = "gemini"\nthinking_budget = 99999')
    assert error(bad, tmp_path).startswith("models[0].thinking_budget: expected an integer")
    other = config_text(tmp_path).replace(
        'provider = "openai"', 'provider = "openai"\nthinking_level = "low"'
    )
    assert error(other, tmp_path) == (
        "models[0].thinking_level: unknown key (it is for provider = 'gemini')"
    )

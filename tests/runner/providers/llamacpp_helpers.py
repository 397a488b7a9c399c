"""Shared pieces of the `llamacpp` tests: configs, the CLI as a subprocess, process checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def bundled_config(tmp_path: Path, model: str = "smollm2-135m", **options: object) -> Path:
    """A small config of one `llamacpp` model and both experiments (`max_tokens = 32`)."""
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in options.items())
    path = tmp_path / "local.toml"
    path.write_text(
        f"""[run]
name = "t"
seed = 1
store = "store.duckdb"

[[models]]
id = "smol"
provider = "llamacpp"
model = "{model}"
max_tokens = 32
max_concurrency = 1
timeout_s = 120
{extra}
[experiments.word_association]
languages = ["en"]
categories = ["risk"]
trials_per_category = 3
explicit_per_category = 1

[experiments.allocation]
languages = ["en"]
services = ["hiv_testing"]
pairs_per_service = 1
roster_size = 20
explanation = [false]
symptoms = ["none"]
explicit_per_service = 1
"""
    )
    return path


def ibias(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):  # type: ignore[no-untyped-def]
    """`ibias ARGS` in a subprocess (the provider starts real processes)."""
    return subprocess.run(
        [sys.executable, "-m", "ibias", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=600,
    )


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().split(") ", 1)[1][0] != "Z"
        except OSError:
            return False
    return True

"""`ibias status` loads only what it reads the store and prints the table with: no analysis
library (Polars, Arrow, NumPy, SciPy, Matplotlib), no HTTP client, and none of ibias's config
validation, experiment registry, planning, providers or analysis, whose imports were most of
what a status cost before the store was even opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ibias.store import db
from ibias.store.importer import import_file

#: Loaded by `ibias status` never (a module or any submodule of it).
HEAVY = (
    "polars",
    "pyarrow",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "aiohttp",
    "httpx",
    "anyio",
    "ibias.analysis",
    "ibias.prompts",
    "ibias.runner.config",
    "ibias.runner.providers",
    "ibias.runner.execution.plan",
    "ibias.runner.execution.run",
    "ibias.store.experiments",
    "ibias.store.writer",
)

#: Runs the command in a fresh interpreter; prints its exit code, then the modules it loaded.
_PROBE = """
import contextlib, io, json, sys
from ibias.runner.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("status_imports")
    lines = [
        {
            "experiment": "prompts",
            "model_id": "ext",
            "language": "en",
            "item": {"id": f"x{i}", "text": f"item {i}"},
            "messages": [{"role": "user", "content": f"item {i}?"}],
            "content": f"reply {i}",
            "provider_model": "ext-2026",
        }
        for i in range(3)
    ]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    path = folder / "store.duckdb"
    con = db.open_store(path, create=True)
    try:
        import_file(con, folder / "a.jsonl")
    finally:
        con.close()
    return path


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["table", "json"])
def test_status_loads_no_heavy_module(store: Path, extra: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "status", "--store", str(store), *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    probe = json.loads(result.stdout.splitlines()[-1])
    assert probe["code"] == 0
    assert ('"done":3' if extra else "3/3") in probe["out"]  # it did read the store
    loaded = [m for m in probe["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []

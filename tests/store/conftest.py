"""Fixtures of the store tests: a store served in-process as `ibias run` serves it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from ibias.runner.cli import main
from ibias.store.db import open_store
from ibias.store.live import LiveServer
from ibias.store.lock import StoreLock
from tests.store.test_importer import lines


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("live")
    src = folder / "replies.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in lines()) + "\n")
    path = folder / "store.duckdb"
    assert main(["import", str(src), "--store", str(path)]) == 0
    return path


class Served:
    """A store held and served as `ibias run` holds and serves it."""

    def __init__(self, store: Path, server: LiveServer, con: duckdb.DuckDBPyConnection) -> None:
        self.store, self.server, self.con = store, server, con


@contextmanager
def _serving(source: Path, tmp_path: Path) -> Iterator[Served]:
    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)
    with StoreLock(store):
        con = open_store(store)
        server = LiveServer.start(con, store)
        assert server is not None
        try:
            yield Served(store, server, con)
        finally:
            server.close()
            con.close()


@pytest.fixture
def served(source: Path, tmp_path: Path) -> Iterator[Served]:
    with _serving(source, tmp_path) as held:
        yield held

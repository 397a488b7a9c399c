"""What the batch tests share: polling that never waits (the simulator's batch clock moves one
state per read, so a test never sleeps) and a read of the store after the run closed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb


async def no_sleep(_: float) -> None:
    """Stands in for `anyio.sleep` between polls."""


def query(store: Path, sql: str) -> list[tuple[Any, ...]]:
    """All rows of one statement over a closed store, read-only."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()

"""Test-only: moments of a run at which the torture tests stop it for certain.

A signal sent after a sleep lands wherever the run happens to be; the full-size resume test
must interrupt each phase at least once (planning, requests, the final flush), whatever the
machine's speed. When `IBIAS_PHASE_HOOK` names a folder, the run marks each moment it reaches
by creating a file there named after the phase (`planning`, `requests`, `final_flush`), and
when the folder's `hold` file says `PHASE N`, the N-th time the run reaches PHASE it waits
there until a `release` file appears (at most `HOLD_S`), so that the test can signal or kill
it inside that phase. The moments: after each planning batch is stored, and inside each
writer flush's transaction just before its COMMIT (`requests` while the run goes on,
`final_flush` for the flush that closes the writer).

Without the variable, `flush_hook()` is None and `reached` returns at once: nothing in a
user's run pays for this.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ENV = "IBIAS_PHASE_HOOK"
#: The longest a held phase waits for `release` (a test that died must not hang the run).
HOLD_S = 120.0

_counts: Counter[str] = Counter()
_lock = threading.Lock()


def _folder() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def reached(phase: str) -> None:
    """Mark `phase` reached; wait there if the test holds its N-th occurrence."""
    folder = _folder()
    if folder is None:
        return
    with _lock:
        _counts[phase] += 1
        n = _counts[phase]
    (folder / phase).touch()
    try:
        held = (folder / "hold").read_text().split()
    except OSError:
        return
    if held != [phase, str(n)]:
        return
    (folder / "held").write_text(f"{phase} {n}")
    deadline = time.monotonic() + HOLD_S
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _flush(closing: bool) -> None:
    reached("final_flush" if closing else "requests")


def flush_hook() -> Callable[[bool], None] | None:
    """The writer's `before_commit` hook when the tests asked for phases, else None."""
    return _flush if _folder() is not None else None

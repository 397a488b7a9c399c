"""The loop ibias starts for itself: uvloop where installed, asyncio's own otherwise."""

from __future__ import annotations

import sys

import pytest

from ibias.runner.event_loop import event_loop_options


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_uvloop_is_used_where_it_is_installed() -> None:
    assert event_loop_options() == {"use_uvloop": True}


def test_without_uvloop_asyncio_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert event_loop_options() == {}

"""The loop ibias starts for itself: uvloop where installed, asyncio's own otherwise."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from ibias.runner.execution.event_loop import event_loop_options


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_uvloop_is_used_where_it_is_installed() -> None:
    assert event_loop_options() == {"use_uvloop": True}


def test_without_uvloop_asyncio_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert event_loop_options() == {}


def test_a_run_serving_the_simulator_runs_on_asyncio_loop() -> None:
    """Client and in-process simulator on one uvloop loop wedged whole models (every request
    timing out); a run that serves the simulator gets asyncio's loop, any other uvloop."""
    from ibias.runner.commands.demo import DEMO_CONFIG
    from ibias.runner.config import load_config

    demo = load_config(DEMO_CONFIG)
    assert event_loop_options(demo) == {}
    remote = dataclasses.replace(
        demo,
        models=tuple(
            dataclasses.replace(m, provider="openai", base_url="https://api.openai.com/v1")
            for m in demo.models
        ),
    )
    expected = {} if sys.platform == "win32" else {"use_uvloop": True}
    assert event_loop_options(remote) == expected

"""Which event loop runs ibias's async work when ibias starts one itself (the CLI, `ibias.run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibias.runner.config import Config


def serves_simulator(config: Config) -> bool:
    """Whether the run serves the built-in simulator itself, on its own event loop: a
    rehearsal (`--rehearse`: every model answered by it, runner/execution/rehearsal.py) or a config
    with a `simulator` model."""
    return config.rehearsal or any(m.provider == "simulator" for m in config.models)


def event_loop_options(config: Config | None = None) -> dict[str, bool]:
    """anyio's asyncio backend on uvloop where it is installed (Linux and macOS): the same
    aiohttp requests cost less CPU a request on its loop (bench/BENCHMARKS.md), and a sweep
    against fast endpoints is bound by the client's CPU before anything else.

    asyncio's own loop instead when the run serves the simulator in-process (`config` is a
    rehearsal or has a `simulator` model) or uvloop is missing (Windows). Client and server on
    one uvloop loop wedge: on a quiet 2-core machine the demo grid left two of its seven
    models with every request timing out within 80 s, and it failed CI; on asyncio's loop, or
    with the simulator in a process of its own, no model stalls (bench/BENCHMARKS.md, "The
    run's loop"). Code that starts its own loop (`ibias.arun`) keeps it."""
    if config is not None and serves_simulator(config):
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}

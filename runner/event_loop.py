"""Which event loop runs ibias's async work when ibias starts one itself (the CLI, `ibias.run`)."""

from __future__ import annotations


def event_loop_options() -> dict[str, bool]:
    """anyio's asyncio backend on uvloop where it is installed (Linux and macOS): the same
    aiohttp requests cost less CPU a request on its loop (bench/BENCHMARKS.md), and a sweep
    against fast endpoints is bound by the client's CPU before anything else. Elsewhere
    (Windows), asyncio's own loop. Code that starts its own loop (`ibias.arun`) keeps it."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}

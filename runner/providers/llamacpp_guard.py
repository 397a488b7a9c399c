"""The process ibias starts for a `llamacpp` model: it runs llama-cpp-python's server and dies
with the runner, however the runner ends.

Why a guard rather than `python -m llama_cpp.server` itself: `kill -9` of the runner runs no
cleanup, so the server must notice on its own. Two ways, both here: the runner holds this
process's stdin pipe open and never writes to it, so the pipe reaches end of file when the
runner dies, on Linux and macOS alike (a thread waits for it and ends the process); on Linux
the kernel's parent-death signal (prctl PR_SET_PDEATHSIG, SIGKILL) also does it at once.
Usage: `python -m ibias.runner.providers.llamacpp_guard MODULE_OR_SCRIPT ARGS...`.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1


def _die_with_parent_on_linux(parent: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # the stdin watch still holds
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _watch_stdin() -> None:
    """Block until the runner's end of the pipe closes, then end this process."""
    with contextlib.suppress(OSError):  # os.read, not sys.stdin: no lock held at shutdown
        while os.read(0, 4096):
            pass
    os._exit(0)


def main(argv: list[str]) -> None:
    parent = int(os.environ.get("IBIAS_PARENT_PID", os.getppid()))
    _die_with_parent_on_linux(parent)
    threading.Thread(target=_watch_stdin, name="ibias-parent-watch", daemon=True).start()
    target, args = argv[0], argv[1:]
    sys.argv = [target, *args]
    code: object = 0
    try:
        if target.endswith(".py"):
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    # Ended here, not by the interpreter's shutdown, which would wait on the watching thread.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


if __name__ == "__main__":
    main(sys.argv[1:])

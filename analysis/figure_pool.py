"""Figures drawn by this process and helper processes at once, files identical either way.

Drawing is matplotlib's per-artist Python: one core per figure, whatever the machine has. So
`analyze` on a store big enough to pay starts `workers - 1` helpers before it computes the
tables (they import matplotlib meanwhile), and each figure function hands its figures to
`draw_each`: this process and the helpers take them from one queue, heaviest first, and the
results come back in the order asked for.

A helper is a plain `python -c` child talking pickles over its stdin and stdout, not
multiprocessing: spawn would re-run a user's unguarded script, fork would inherit Polars' and
DuckDB's thread pools. A job carries the caller's rcParams (its style included) and simulated
marks, so a helper draws the bytes this process would. A helper that does not start, dies or
fails a job hands the job back and this process draws it, so a real error in a figure is
raised here with its own type. Helpers run in their own session and ignore Ctrl-C (a
terminal's interrupt is the owner's), end when their stdin closes (so also when the owner is
killed), and the owner (`started`) stops them on leaving and kills them on an error or an
interrupt.
"""

from __future__ import annotations

import collections
import importlib
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Answered trials under which `analyze` draws alone: a small store's figures take less than
#: a helper's start-up (importing matplotlib and Polars, about a CPU second).
MIN_TRIALS = 20_000

# On its stdin's end a helper leaves at once: its answers are flushed and its files closed,
# and a normal interpreter exit (tearing down matplotlib and Polars) would keep the owner
# waiting for nothing.
_SERVE = "import os; from ibias.analysis.figure_pool import serve; serve(); os._exit(0)"
_POOL: ContextVar[Pool | None] = ContextVar("figure_pool", default=None)


@dataclass(frozen=True)
class Job(Generic[T]):
    """One figure to draw: a module-level function, its arguments, and how heavy it is
    (panels or rows: heaviest are handed out first, so no one is left with a big one last)."""

    fn: Callable[..., T]
    args: tuple[Any, ...]
    weight: int = 1


@dataclass(frozen=True)
class _Request:
    module: str
    name: str
    args: tuple[Any, ...]
    rc: dict[str, Any]
    simulated: dict[str, str]


def _environment() -> dict[str, str]:
    """The caller's environment, with the folder this `ibias` was imported from first on the
    path, so a helper draws with the same code (a checkout, not another installed copy)."""
    import ibias

    home = str(Path(ibias.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": home if not path else os.pathsep.join((home, path))}


class _Helper:
    """One helper process and the pipe protocol to it (a pickle each way per job)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_environment(),
            start_new_session=True,  # a terminal's Ctrl-C is the owner's to handle
        )

    def ask(self, request: _Request) -> tuple[bool, Any]:
        """(True, result) or (False, why); (False, ...) also when the helper is gone."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            pickle.dump(request, stdin, protocol=pickle.HIGHEST_PROTOCOL)
            stdin.flush()
            answer: tuple[bool, Any] = pickle.load(stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError) as error:
            return False, error
        return answer

    def stop(self, *, kill: bool) -> None:
        if kill:
            self.process.kill()
        elif self.process.stdin is not None:
            try:
                self.process.stdin.close()  # the helper's loop ends on EOF
            except OSError:
                self.process.kill()
        try:
            self.process.wait(timeout=None if kill else 10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Pool:
    """Helper processes kept for one `analyze`; see the module docstring."""

    def __init__(self, helpers: int) -> None:
        self._helpers: list[_Helper] = []
        for _ in range(helpers):
            try:
                self._helpers.append(_Helper())
            except OSError:
                break  # fewer helpers: this process draws the rest

    def draw_each(self, jobs: Sequence[Job[T]]) -> list[T]:
        """Every job's result, in the jobs' order; see the module docstring."""
        import matplotlib as mpl

        from ibias.analysis.figures import simulated_marks

        rc: dict[str, Any] = {k: v for k, v in mpl.rcParams.items() if k != "backend"}
        simulated = dict(simulated_marks())
        order = sorted(range(len(jobs)), key=lambda i: -jobs[i].weight)
        queue, lock = collections.deque(order), threading.Lock()
        done: dict[int, T] = {}

        def take() -> int | None:
            with lock:
                return queue.popleft() if queue else None

        def feed(helper: _Helper) -> None:
            while (i := take()) is not None:
                job = jobs[i]
                fn = job.fn
                request = _Request(fn.__module__, fn.__qualname__, job.args, rc, simulated)
                ok, result = helper.ask(request)
                if not ok:
                    with lock:
                        queue.append(i)  # this process draws it (and raises its error)
                    return
                done[i] = result

        feeders = [threading.Thread(target=feed, args=(h,), daemon=True) for h in self._helpers]
        for thread in feeders:
            thread.start()
        try:
            while (i := take()) is not None:
                done[i] = jobs[i].fn(*jobs[i].args)
        except BaseException:
            with lock:
                queue.clear()
            self.stop(kill=True)  # no waiting for their figures; later batches are drawn here
            raise
        for thread in feeders:
            thread.join()
        for i in list(queue):  # handed back by a helper after this process ran out of work
            done[i] = jobs[i].fn(*jobs[i].args)
        return [done[i] for i in range(len(jobs))]

    def stop(self, *, kill: bool = False) -> None:
        for helper in self._helpers:
            helper.stop(kill=kill)
        self._helpers = []

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [h.process for h in self._helpers]


@contextmanager
def started(helpers: int) -> Iterator[Pool | None]:
    """`helpers` helper processes (none when 0) for the block inside: stopped on leaving it,
    killed when it raises (Ctrl-C included)."""
    if helpers < 1:
        yield None
        return
    pool = Pool(helpers)
    try:
        yield pool
    except BaseException:
        pool.stop(kill=True)
        raise
    pool.stop()


@contextmanager
def drawing(pool: Pool | None) -> Iterator[None]:
    """Figure functions inside hand their figures to `pool` (`draw_each`)."""
    token = _POOL.set(pool)
    try:
        yield
    finally:
        _POOL.reset(token)


def draw_each(jobs: Sequence[Job[T]]) -> list[T]:
    """The jobs' results in order: drawn with the helpers of the current `drawing` when there
    is one and more than one job, else here, one after the other."""
    pool = _POOL.get()
    if pool is None or len(jobs) < 2:
        return [job.fn(*job.args) for job in jobs]
    return pool.draw_each(jobs)


def serve() -> None:
    """A helper's loop: a request in, (True, result) or (False, why) out, until stdin ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner stops helpers; no tracebacks
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what a figure prints must not mix in
    import matplotlib as mpl

    from ibias.analysis import figures

    while True:
        try:
            request: _Request = pickle.load(requests)
        except EOFError:
            return
        try:
            fn = getattr(importlib.import_module(request.module), request.name)
            with mpl.rc_context(request.rc), figures.marking(request.simulated):  # type: ignore[arg-type]
                answer: tuple[bool, Any] = (True, fn(*request.args))
        except Exception as error:  # handed back: the owner draws it and raises it itself
            answer = (False, repr(error))
        try:
            pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
            answers.flush()
        except BrokenPipeError:
            return  # the owner is gone (killed): nobody to answer

"""`parallel.compute_all`: the tables' jobs side by side on threads, each result under its
name in the jobs' order, and two large jobs never at once when together they do not fit the
memory budget, while small ones still run beside a large one."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ibias.analysis import memory, parallel

WAIT_S = 20.0  # only a broken scheduler waits this long: the events below come at once


class Recorder:
    """Jobs that record how many of the large ones ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.most_large = 0

    def job(
        self, name: str, *, large: bool, then: Callable[[], None] = lambda: None
    ) -> Callable[[], str]:
        def run() -> str:
            with self.lock:
                self.running.add(name)
                if large:
                    self.most_large = max(self.most_large, len(self.running & LARGE))
            then()
            with self.lock:
                self.running.discard(name)
            return f"result of {name}"

        return run


LARGE = {"first", "second"}


def test_results_come_in_the_jobs_order_whatever_ends_first() -> None:
    second_done = threading.Event()

    def first() -> int:
        assert second_done.wait(WAIT_S)  # ends last
        return 1

    def second() -> int:
        second_done.set()
        return 2

    found = parallel.compute_all({"first": first, "second": second}, threads=2)
    assert list(found.items()) == [("first", 1), ("second", 2)]


def test_two_jobs_too_large_together_run_one_after_the_other_beside_the_small_ones() -> None:
    recorder = Recorder()
    small_ran = threading.Event()
    # The first large job waits for the small one: it can only finish if the small job runs
    # while it does (the second large job, next in order, does not fit beside it).
    jobs = {
        "first": recorder.job("first", large=True, then=lambda: small_ran.wait(WAIT_S) or None),
        "second": recorder.job("second", large=True),
        "small": recorder.job("small", large=False, then=small_ran.set),
    }
    sizes = {"first": 300, "second": 300}
    found = parallel.compute_all(jobs, threads=2, sizes=sizes, budget=512)
    assert small_ran.is_set()
    assert recorder.most_large == 1
    assert found == {name: f"result of {name}" for name in jobs}


def test_jobs_that_fit_together_run_at_once() -> None:
    both = threading.Barrier(2, timeout=WAIT_S)  # broken (raises) unless both run at once
    jobs = {name: both.wait for name in ("first", "second")}
    found = parallel.compute_all(jobs, threads=2, sizes={"first": 200, "second": 300}, budget=512)
    assert sorted(found.values()) == [0, 1]


def test_a_job_larger_than_the_budget_still_runs_alone() -> None:
    recorder = Recorder()
    jobs = {name: recorder.job(name, large=True) for name in ("first", "second")}
    found = parallel.compute_all(jobs, threads=2, sizes=dict.fromkeys(jobs, 10**12), budget=1)
    assert found == {name: f"result of {name}" for name in jobs}
    assert recorder.most_large == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_the_first_failing_job_in_order_raises_after_every_job_ran(threads: int) -> None:
    ran: list[str] = []

    def fails(name: str) -> Callable[[], None]:
        def run() -> None:
            ran.append(name)
            raise ValueError(name)

        return run

    def ok() -> str:
        ran.append("ok")
        return "ok"

    jobs = {"ok": ok, "first": fails("first"), "second": fails("second")}
    with pytest.raises(ValueError, match=r"^first$"):
        parallel.compute_all(jobs, threads=threads)
    assert sorted(ran) == (["first", "ok"] if threads == 1 else ["first", "ok", "second"])


def test_each_job_gives_back_the_memory_it_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[int] = []
    monkeypatch.setattr(memory, "release", lambda: released.append(1))
    parallel.compute_all({"a": lambda: 1, "b": lambda: 2, "c": lambda: 3}, threads=2)
    assert len(released) == 3

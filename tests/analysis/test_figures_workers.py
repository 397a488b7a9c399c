"""Figures drawn with helper processes (analysis/figure_pool.py) are the files one process
draws, and the helpers never outlive the analysis.

`analyze` on the small simulated store (both experiments, en + es) writes byte-identical PNG,
SVG and data files, and the same figure list, whether it draws alone or with a helper started
before the tables; a helper that cannot start leaves its figures to this process. The pool
returns results in the order asked for, raises a figure's own error here, survives a Ctrl-C
sent to its helpers, and stops them when the analysis ends, fails or is interrupted.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ibias.analysis import analyze as analyze_module
from ibias.analysis import figure_pool
from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.analysis.figure_pool import Job


def _pid(_: int) -> int:
    """A job that says which process ran it (slow enough for a helper to take one)."""
    time.sleep(0.05)
    return os.getpid()


def _square(x: int) -> int:
    return x * x


def _fails(x: int) -> int:
    raise LookupError(f"figure {x} has no data")


def _figure_files(result: AnalysisResult) -> dict[str, bytes]:
    found = [*result.figures, *result.out_dir.rglob("*.data.csv")]
    return {str(p.relative_to(result.out_dir)): p.read_bytes() for p in sorted(set(found))}


def _analysed(
    store: Path, out: Path, monkeypatch: pytest.MonkeyPatch, *, helpers: bool
) -> tuple[AnalysisResult, int]:
    """`analyze` with one helper (any store size) or none, and how many figures helpers drew."""
    drawn_by_helpers = 0
    ask = figure_pool._Helper.ask

    def counted(self: figure_pool._Helper, request: figure_pool._Request) -> tuple[bool, object]:
        nonlocal drawn_by_helpers
        answer = ask(self, request)
        drawn_by_helpers += answer[0]
        return answer

    with monkeypatch.context() as mp:
        mp.setattr(figure_pool._Helper, "ask", counted)
        mp.setattr(figure_pool, "MIN_TRIALS", 0 if helpers else 10**12)
        mp.setattr(analyze_module, "workers", lambda: 2)
        result = analyze(store, out, bootstrap=200, seed=3)
    return result, drawn_by_helpers


def test_figures_are_the_same_files_with_a_helper(
    sim_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone, none_drawn = _analysed(sim_store, tmp_path / "alone", monkeypatch, helpers=False)
    helped, helper_drew = _analysed(sim_store, tmp_path / "helped", monkeypatch, helpers=True)
    assert none_drawn == 0 and helper_drew >= 1
    files = _figure_files(alone)
    assert any(name.endswith(".data.csv") for name in files)
    assert _figure_files(helped) == files
    assert [p.relative_to(helped.out_dir) for p in helped.figures] == [
        p.relative_to(alone.out_dir) for p in alone.figures
    ]


def test_a_helper_that_cannot_start_leaves_its_figures_here(
    sim_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone, _ = _analysed(sim_store, tmp_path / "alone", monkeypatch, helpers=False)
    monkeypatch.setattr(figure_pool, "_SERVE", "import sys; sys.exit(3)")
    broken, helper_drew = _analysed(sim_store, tmp_path / "broken", monkeypatch, helpers=True)
    assert helper_drew == 0
    assert _figure_files(broken) == _figure_files(alone)


def test_the_pool_answers_in_order_and_shares_the_work() -> None:
    with figure_pool.started(1) as pool:
        assert pool is not None
        with figure_pool.drawing(pool):
            squares = figure_pool.draw_each([Job(_square, (i,), weight=i) for i in range(9)])
            pids = figure_pool.draw_each([Job(_pid, (i,)) for i in range(40)])
    assert squares == [i * i for i in range(9)]
    assert os.getpid() in pids and set(pids) - {os.getpid()}


def test_a_failing_figure_raises_its_own_error_here() -> None:
    with figure_pool.started(1) as pool, figure_pool.drawing(pool):
        with pytest.raises(LookupError, match="has no data"):
            figure_pool.draw_each([Job(_square, (1,)), Job(_fails, (2,)), Job(_fails, (3,))])
        assert figure_pool.draw_each([Job(_square, (i,)) for i in range(4)]) == [0, 1, 4, 9]


def test_helpers_end_with_the_analysis_and_ignore_ctrl_c() -> None:
    with figure_pool.started(1) as pool:
        assert pool is not None
        processes = pool.processes
        with figure_pool.drawing(pool):
            assert set(figure_pool.draw_each([Job(_pid, (i,)) for i in range(40)])) != {
                os.getpid()
            }  # the helper is up and drawing
            for process in processes:
                process.send_signal(signal.SIGINT)
            pids = figure_pool.draw_each([Job(_pid, (i,)) for i in range(40)])
            assert set(pids) != {os.getpid()}
            assert all(p.poll() is None for p in processes)
    assert [p.returncode for p in processes] == [0]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, RuntimeError])
def test_helpers_are_killed_when_the_analysis_fails(interruption: type[BaseException]) -> None:
    processes = []
    with pytest.raises(interruption), figure_pool.started(1) as pool:
        assert pool is not None
        processes = pool.processes
        raise interruption()
    assert processes and all(p.returncode is not None for p in processes)


def test_a_small_store_starts_no_helper(
    sim_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(helpers: int) -> None:
        raise AssertionError("a helper was started for a small store")

    monkeypatch.setattr(figure_pool.Pool, "__init__", refuse)
    monkeypatch.setattr(analyze_module, "workers", lambda: 2)
    result = analyze(sim_store, tmp_path / "out", bootstrap=50, seed=3)
    assert result.figures

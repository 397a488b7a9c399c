"""The `ibias` command's entry: `main`'s exit code, all of its output, an ordinary exit (the
exit handlers of libraries and plugins run), and a stop signal during that exit still ends
it with 130 and one line, no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import IBIAS


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_help_and_bad_arguments_keep_their_exit_codes() -> None:
    shown = subprocess.run([*IBIAS, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "usage: ibias" in shown.stdout
    refused = subprocess.run([*IBIAS, "run"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("error:")


def test_everything_printed_reaches_a_pipe_before_the_process_ends() -> None:
    done = _python(
        """
        import sys
        from ibias.runner import cli
        def main() -> int:
            sys.stdout.write("x" * 1_000_000)  # more than any pipe buffer holds
            print("last line", file=sys.stderr)
            return 3
        cli.main = main
        cli.entry()
        """
    )
    assert done.returncode == 3
    assert done.stdout == "x" * 1_000_000
    assert done.stderr == "last line\n"


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    marker = tmp_path / "written"
    done = _python(
        f"""
        import threading, time
        from pathlib import Path
        from ibias.runner import cli
        def late() -> None:
            time.sleep(0.3)
            Path({str(marker)!r}).write_text("done")
        def main() -> int:
            threading.Thread(target=late).start()  # not a daemon
            return 0
        cli.main = main
        cli.entry()
        """
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "done"


def test_exit_handlers_run() -> None:
    """A library's or plugin's `atexit` handler (a telemetry flush, a temporary folder) runs
    when the command ends, as in any Python program."""
    done = _python(
        """
        import atexit, sys
        from ibias.runner import cli
        def main() -> int:
            atexit.register(lambda: print("exit handler ran", flush=True))
            return 0
        cli.main = main
        cli.entry()
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exit handler ran\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_while_the_command_exits_gives_130_and_one_line(signum: int) -> None:
    """The command has returned; a slow exit handler still runs when the signal comes."""
    code = textwrap.dedent(
        """
        import atexit, signal, sys, time
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)  # whatever the test runner inherited
        from ibias.runner import cli
        def slow() -> None:
            print("exiting", flush=True)
            time.sleep(60)
        def main() -> int:
            atexit.register(slow)
            return 0
        cli.main = main
        cli.entry()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "exiting\n"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert err == "interrupted\n"


@pytest.mark.parametrize("preset", [None, "dirty_decay_ms:-1"])
def test_polars_allocator_is_set_before_anything_loads_polars(preset: str | None) -> None:
    """`ibias` sets Polars' allocator to give freed pages back (`startup.POLARS_ALLOCATOR`,
    10x `analyze` 1,045 -> 957 MB) before the command, hence Polars, is loaded; a value the
    user set is kept."""
    done = _python(
        f"""
        import os, sys, types
        os.environ.pop("_RJEM_MALLOC_CONF", None)
        if {preset!r} is not None:
            os.environ["_RJEM_MALLOC_CONF"] = {preset!r}
        command = types.ModuleType("ibias.runner.cli")  # stands in for the command
        def entry():
            print(os.environ.get("_RJEM_MALLOC_CONF"), "polars" in sys.modules)
        command.entry = entry
        sys.modules["ibias.runner.cli"] = command
        from ibias.runner import startup
        startup.entry()
        """
    )
    assert done.returncode == 0, done.stderr
    from ibias.runner.startup import POLARS_ALLOCATOR

    assert done.stdout.split() == [preset or POLARS_ALLOCATOR[1], "False"]

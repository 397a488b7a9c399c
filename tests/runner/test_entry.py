"""The `ibias` command's entry: `main`'s exit code, all of its output, and no interpreter
teardown (which cost every run about 50 ms) unless a non-daemon thread still runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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

"""A stop signal at any moment of `ibias run`'s start-up ends it with exit 130, no traceback.

Loading the command took 0.1 to 0.4 s before the run opened its own signal receiver: SIGINT
then printed a KeyboardInterrupt traceback and SIGTERM or SIGHUP killed the process (-15, -1).
The command now handles them from its first line of code (runner/startup.py).

"Start" here is the moment that first line has run: the test watches the process's caught
signals (`SigCgt` in /proc/PID/status) until SIGTERM is among them, then waits each delay and
sends the signal. What comes before (the interpreter and `site` starting, 20 to 30 ms with an
editable install) runs no ibias code, so a signal then ends the process the system's way; that
is not a state the command can be in. The test asserts outcomes only, never how long anything
took.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import IBIAS, model_block, write_config

DELAYS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/PID/status"
)


def caught(pid: int) -> int:
    """The process's caught-signals mask (bit n-1 for signal n); 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


def default_stop_signals() -> None:
    """In the child: the stop signals at their defaults, whatever the test runner inherited
    (`nohup` ignores SIGHUP, a shell's background job SIGINT; an ignored signal stays ignored
    by design, which is not what these tests are about)."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def run_and_stop(config: Path, signum: int, delay_s: float) -> tuple[int | None, str]:
    """`ibias run CONFIG`, the signal `delay_s` after its handlers are in place; (code, stderr)."""
    proc = subprocess.Popen(
        [*IBIAS, "run", str(config), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + 60
        while not caught(proc.pid) & (1 << (signal.SIGTERM - 1)):
            assert proc.poll() is None, "the run ended before its handlers were installed"
            assert time.monotonic() < deadline, "the run never installed its handlers"
            time.sleep(0.0005)
        if delay_s:
            time.sleep(delay_s)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_stop_signal_at_any_moment_of_start_up_exits_130(tmp_path: Path, signum: int) -> None:
    outcomes: dict[float, tuple[int | None, str]] = {}

    def one(delay_s: float, config: Path) -> None:
        outcomes[delay_s] = run_and_stop(config, signum, delay_s)

    threads = []
    for delay_s in DELAYS_S:  # side by side, each on its own store
        folder = tmp_path / f"after-{delay_s}s"
        folder.mkdir()
        # 60 requests a minute for 40 trials: no run ends before its signal reaches it.
        model = model_block("m", provider="simulator", model="x", rpm=60)
        config = write_config(folder, [model], n_prompts=40)
        threads.append(threading.Thread(target=one, args=(delay_s, config)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for delay_s in DELAYS_S:
        code, err = outcomes[delay_s]
        assert "Traceback" not in err, f"{delay_s} s: {err}"
        assert code == 130, f"{delay_s} s: exit {code}: {err}"
        assert err.strip().splitlines()[-1].startswith("interrupted"), f"{delay_s} s: {err}"


PROBE = """
import json, runpy, signal, sys

class Probe:
    '''Notes the stop signals' handlers when the command line module starts loading.'''

    def find_spec(self, name, path=None, target=None):
        if name == "ibias.runner.cli":
            handlers = {
                s.name: getattr(signal.getsignal(s), "__qualname__", str(signal.getsignal(s)))
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            }
            print(json.dumps(handlers), flush=True)
            sys.meta_path.remove(self)
        return None

sys.meta_path.insert(0, Probe())
sys.argv = ["ibias", "--version"]
runpy.run_module("ibias", run_name="__main__", alter_sys=True)
"""


def test_the_handlers_are_in_place_before_the_command_loads() -> None:
    """`python -m ibias` (and the console script, which calls the same `entry`) handles the
    stop signals before it imports the command line and all it needs; no timing involved."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=default_stop_signals,
    )
    assert done.returncode == 0, done.stderr
    handlers = json.loads(done.stdout.splitlines()[0])
    assert handlers == dict.fromkeys(("SIGINT", "SIGTERM", "SIGHUP"), "_on_stop_signal")


def test_the_console_script_starts_where_python_m_does() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "ibias"]
    assert script.value == "ibias.runner.startup:entry"


def test_an_ignored_sighup_stays_ignored() -> None:
    """Under `nohup` SIGHUP is ignored when the command starts; it must stay so."""
    code = (
        "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
        "from ibias.runner import startup; startup.install(); "
        "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "True", done.stderr

"""`llamacpp`: a GGUF model served by llama-cpp-python's server, which ibias starts and stops.

Why a provider that owns a process: a user can try ibias on a real model with no key and no
network, and a researcher can audit open weights on their own machine, without starting and
minding a server. The server speaks OpenAI's protocol, so trials go through the `openai`
provider's code, pointed at the loopback port the server was started on.

The run's provider lifecycle is the hook: `start()` (before the first trial) launches the server
in a process group of its own and waits until it answers; `close()` (at the end of every run,
after Ctrl-C and errors too) stops the group. If the runner is killed outright, the server's
guard (`llamacpp_guard`) ends it. The model name the trial key records is
`NAME@sha256:HEX` (`gguf.keyed_name`, set by the config loader), so another file at the same
path is another model. llama-cpp-python is never imported here: it runs as a subprocess of the
same interpreter (the optional extra `local`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

import aiohttp
import anyio
import msgspec
from msgspec import Meta

from ibias.prompts.base import SettingsError
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import ProviderContext
from ibias.runner.providers.gguf import resolve_gguf, split_keyed_name
from ibias.runner.providers.http import max_body_bytes_of
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.providers.registry import provider
from ibias.runner.providers.traits import BUILTIN_TRAITS

__all__ = [
    "SERVER_ENV",
    "SERVER_MODULE",
    "LlamaCppOptions",
    "LlamaCppProvider",
    "ManagedServer",
    "ServerSettings",
]

#: What the guard runs: llama-cpp-python's server module. `IBIAS_LLAMACPP_SERVER` names
#: another module or a script path ending in .py (the tests' fake servers).
SERVER_MODULE = "llama_cpp.server"
SERVER_ENV = "IBIAS_LLAMACPP_SERVER"
GUARD_MODULE = "ibias.runner.providers.llamacpp_guard"
#: Log lines quoted when the server does not come up.
LOG_TAIL_LINES = 3
STOP_GRACE_S = 5.0


class LlamaCppOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The `llamacpp` provider's own keys in a `[[models]]` table (the GGUF file is the core
    key `model`: a path or the short name `smollm2-135m`)."""

    n_ctx: Annotated[int, Meta(ge=256)] | None = None
    n_threads: Annotated[int, Meta(ge=1)] | None = None
    #: A loopback port; absent: a free one is picked.
    port: Annotated[int, Meta(ge=1, le=65535)] | None = None
    start_timeout_s: Annotated[float, Meta(gt=0)] | None = None


@dataclass(frozen=True)
class ServerSettings:
    """How to start one server (from the model's config)."""

    gguf: Path
    n_ctx: int = 2048
    n_threads: int | None = None
    port: int | None = None
    start_timeout_s: float = 120.0

    def argv(self, port: int) -> list[str]:
        """The server's arguments, after the module the guard runs."""
        args = ["--model", str(self.gguf), "--host", "127.0.0.1", "--port", str(port)]
        args += ["--n_ctx", str(self.n_ctx)]
        if self.n_threads is not None:
            args += ["--n_threads", str(self.n_threads)]
        return args


def free_port() -> int:
    """A loopback port free now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(port: int) -> bool:
    """Whether a socket holds the port, binding as the server will (SO_REUSEADDR, as uvicorn
    does): a port left only in TIME_WAIT by a server just stopped (a resume right after a stop)
    is free for the server, and must not be refused here."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last non-empty lines of the server's log, joined into one line."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = deque((ln.strip() for ln in text.splitlines() if ln.strip()), maxlen=lines)
    return " | ".join(tail) or "(empty log)"


class ManagedServer:
    """One llama-cpp-python server process (group) on a loopback port: start, wait, stop."""

    def __init__(self, settings: ServerSettings, model_id: str) -> None:
        self.settings = settings
        self.model_id = model_id
        self.port = settings.port if settings.port is not None else free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.started_in_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _fail(self, what: str) -> SettingsError:
        return SettingsError(f"model {self.model_id!r}", what)

    def launch(self) -> None:
        """Start the guard and the server (called on the event loop's thread: the Linux
        parent-death signal is tied to the thread that starts the process)."""
        if self.settings.port is not None and port_taken(self.port):
            raise self._fail(
                f"port {self.port} on 127.0.0.1 is taken; free it or remove port to use a free one"
            )
        target = os.environ.get(SERVER_ENV) or SERVER_MODULE
        if target == SERVER_MODULE and importlib.util.find_spec("llama_cpp") is None:
            raise self._fail(
                "provider 'llamacpp' needs llama-cpp-python in this environment: make local "
                "(or pip install 'ibias[local]')"
            )
        fd, log = tempfile.mkstemp(prefix="ibias-llamacpp-", suffix=".log")
        self.log_path = Path(log)
        with os.fdopen(fd, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", GUARD_MODULE, target, *self.settings.argv(self.port)],
                stdin=subprocess.PIPE,  # held open, never written: its end tells the runner died
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a group of its own: Ctrl-C reaches the runner only
                env={**os.environ, "IBIAS_PARENT_PID": str(os.getpid())},
            )

    async def wait_ready(self) -> None:
        """Until GET /v1/models answers 200; one line with the log's tail if the server
        exits or the timeout passes."""
        assert self.process is not None and self.log_path is not None
        began = time.monotonic()
        deadline = began + self.settings.start_timeout_s
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise self._fail(
                        f"the llama.cpp server exited at start (code {code}): "
                        + log_tail(self.log_path)
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(f"{self.base_url}/models") as resp:
                        if resp.status == 200:
                            self.started_in_s = time.monotonic() - began
                            return
                if time.monotonic() > deadline:
                    raise self._fail(
                        f"the llama.cpp server did not answer within "
                        f"{self.settings.start_timeout_s:g} s: " + log_tail(self.log_path)
                    )
                await anyio.sleep(0.1)

    def stop(self) -> None:
        """Stop the whole group: SIGTERM, then SIGKILL after a grace; idempotent."""
        process, self.process = self.process, None
        if process is not None:
            for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, sig)
                try:
                    process.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            if process.stdin is not None:
                process.stdin.close()
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None


@provider("llamacpp")
class LlamaCppProvider(OpenAIProvider):
    """The `openai` provider pointed at a llama.cpp server it starts itself."""

    options_schema: ClassVar[type[msgspec.Struct] | None] = LlamaCppOptions
    #: What its models accept and need: declared once, in `BUILTIN_TRAITS`.
    traits = BUILTIN_TRAITS["llamacpp"]

    def __init__(self, *, server: ManagedServer, **kwargs: Any) -> None:
        super().__init__(base_url=server.base_url, **kwargs)
        self.server = server

    @classmethod
    def check_options(cls, options: Any) -> None:
        return None

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        name, _ = split_keyed_name(model.model)
        try:
            gguf = resolve_gguf(name)
        except SettingsError as exc:
            raise SettingsError(f"model {model.id!r}", exc.message) from None
        o = model.options
        settings = ServerSettings(
            gguf=gguf,
            n_ctx=o.get("n_ctx") or 2048,
            n_threads=o.get("n_threads"),
            port=o.get("port"),
            start_timeout_s=o.get("start_timeout_s") or 120.0,
        )
        return cls(
            server=ManagedServer(settings, model.id),
            model=model.model,
            api_key=None,
            timeout_s=model.timeout_s,
            max_connections=model.max_concurrency,
            max_body_bytes=max_body_bytes_of(model),
        )

    async def start(self) -> None:
        self.server.launch()
        try:
            await self.server.wait_ready()
            await super().start()
        except BaseException:
            self.server.stop()
            raise

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self.server.stop()

"""`ibias models CONFIG`: one cheap request per configured model, before planning anything.

Why a request rather than the provider's list-models endpoint: only a request checks all of
what an overnight sweep needs at once, through the same provider class the run uses: the key
(401/403), the model name (404 / `not_found_error` / NOT_FOUND), the parameters this host takes
for this model (runner/providers/params.py) and token logprobs when the model asks for them,
the billing state (402, `insufficient_quota`, a
used-up daily quota), and the limits the provider announces in its response headers. Each
model gets one chat of one short user turn with `max_tokens` of at most `MAX_TOKENS`, so a check
of a frontier config costs well under a cent. The answers are not stored.

A 429 that is only throttling (retryable) means the key and the model were accepted: the model
is reported usable, with a note. Any other failure, or a key variable that is not set, fails the
model; the command exits 1 if any model failed (runner/cli.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import anyio

from ibias.runner.config import Config, ModelConfig
from ibias.runner.console import literal, terminal, text
from ibias.runner.providers.base import AttemptError, Limits, ProviderContext, Sampling
from ibias.runner.providers.registry import ProviderFactory, create_provider
from ibias.runner.providers.retries import Verdict, redact
from ibias.runner.simulator.provider import LoopbackSimulator

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["MAX_TOKENS", "PROMPT", "ModelCheck", "check_models", "render_checks"]

#: The one message sent, and the most tokens asked for (reasoning models may use them all on
#: thinking and answer nothing: that still proves key, name and parameters).
PROMPT = "Reply with the single word OK."
MAX_TOKENS = 16
#: A check waits at most this long for one model, whatever its `timeout_s`.
MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class ModelCheck:
    """What one model's check found."""

    model_id: str
    provider: str
    model: str
    ok: bool
    status: int | None
    reported_model: str | None
    system_fingerprint: str | None
    rpm: int | None
    tpm: int | None
    latency_ms: float | None
    message: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _limits(limits: Limits | None) -> tuple[int | None, int | None]:
    return (None, None) if limits is None else (limits.rpm, limits.tpm)


async def _check_one(
    model: ModelConfig, key: str | None, context: ProviderContext, factory: ProviderFactory
) -> ModelCheck:
    base = ModelCheck(model.id, model.provider, model.model, False, None, None, None, None, None,
                      None, "")  # fmt: skip
    if model.api_key_env is not None and not key:
        return replace(base, message=f"environment variable {model.api_key_env} is not set")
    cfg = replace(model, max_concurrency=1, timeout_s=min(model.timeout_s, MAX_WAIT_S))
    provider = factory(cfg, key, context)
    sampling = Sampling(
        temperature=model.temperature,
        # Tokens the provider needs beyond the answer (Anthropic's thinking budget, which must
        # be below max_tokens): the check asks for just past them (the config keeps them
        # below max_tokens).
        max_tokens=min(model.max_tokens, MAX_TOKENS + provider.reserved_tokens(model.options)),
        seed=model.sampling_seed,
        top_logprobs=model.top_logprobs,  # an endpoint refusing logprobs fails here, not at night
    )
    started = time.perf_counter()
    try:
        await provider.start()
        try:
            reply = await provider.complete([{"role": "user", "content": PROMPT}], sampling)
        finally:
            await provider.close()
    except AttemptError as exc:
        c = exc.classification
        rpm, tpm = _limits(provider.limits_from_headers(exc.headers))
        usable = c.verdict is Verdict.RETRY and c.is_rate_limit
        message = (
            f"usable, but rate limited right now ({c.message})"
            if usable
            else ("could not check: " if c.verdict is Verdict.RETRY else "") + c.message
        )
        return replace(base, ok=usable, status=exc.status, rpm=rpm, tpm=tpm, message=message)
    except Exception as exc:  # a transport failure that escaped the provider
        c = provider.classify_exception(exc)
        return replace(base, message=f"could not check: {redact(c.message)}")
    latency = (time.perf_counter() - started) * 1000
    rpm, tpm = _limits(provider.limits_from_headers(reply.headers))
    note = "ok" if reply.finish_reason != "content_filter" else "ok (the check prompt was refused)"
    return replace(
        base,
        ok=True,
        status=reply.status,
        reported_model=reply.provider_model,
        system_fingerprint=reply.system_fingerprint,
        rpm=rpm,
        tpm=tpm,
        latency_ms=round(latency, 1),
        message=note,
    )


async def check_models(
    config: Config,
    environ: Mapping[str, str],
    *,
    provider_factory: ProviderFactory | None = None,
) -> list[ModelCheck]:
    """Check every model of `config` side by side; results in the config's order."""
    factory = provider_factory or create_provider
    sim = LoopbackSimulator.for_models(config.run.seed, config.models)
    context = ProviderContext(simulator=sim)
    results: list[ModelCheck | None] = [None] * len(config.models)

    async def one(i: int, model: ModelConfig) -> None:
        key = environ.get(model.api_key_env) if model.api_key_env else None
        results[i] = await _check_one(model, key or None, context, factory)

    try:
        async with anyio.create_task_group() as tg:
            for i, model in enumerate(config.models):
                tg.start_soon(one, i, model)
    finally:
        await sim.stop()
    return [r for r in results if r is not None]


def render_checks(checks: Sequence[ModelCheck], console: Console | None = None) -> None:
    """The checks as a rich table on stdout, what each model was sent as and reported as
    below it, and one line saying how many failed.

    At any width no id is cut or wrapped: each id column is as wide as the longest id. Only
    the free text (a message, a model name) folds, inside its own column, so its second line
    starts under that column, never where an id would, and cannot read as another model.

    Every id, name and message is `Text` with control characters escaped (runner/console.py):
    a provider's error text or a model name with `[...]` in it prints as it is, on any console;
    only the result's colour is ibias's own style."""
    from rich import box
    from rich.cells import cell_len
    from rich.table import Table

    widest = max((cell_len(literal(c.model_id, layout=False)) for c in checks), default=5)
    table = Table(title="models", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("model", no_wrap=True, min_width=widest)
    table.add_column("result", overflow="fold")
    for column in ("rpm", "tpm", "ms"):
        table.add_column(column, justify="right", no_wrap=True)
    names = Table.grid(padding=(0, 2))
    names.add_column(no_wrap=True, min_width=widest)
    names.add_column(overflow="fold")
    for c in checks:
        table.add_row(
            text(c.model_id, layout=False),
            text(c.message, "green" if c.ok else "red", layout=False),
            "-" if c.rpm is None else f"{c.rpm:,}",
            "-" if c.tpm is None else f"{c.tpm:,}",
            "-" if c.latency_ms is None else f"{c.latency_ms:.0f}",
        )
        reported = f", reported as {c.reported_model}" if c.reported_model else ""
        names.add_row(
            text(c.model_id, layout=False), text(f"{c.provider} {c.model}{reported}", layout=False)
        )
    console = console or terminal()
    console.print(table)
    console.print(names)
    failed = sum(not c.ok for c in checks)
    console.print(f"{len(checks) - failed} of {len(checks)} models usable" +
                  (f"; {failed} failed" if failed else ""))  # fmt: skip

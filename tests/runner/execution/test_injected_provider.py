"""A run with an in-process provider handed to `execute()`: no HTTP at all.

The provider is a class defined here, built by a factory passed as `provider_factory`. Its
replies and failures are a function of the prompt, so the exact attempts of every trial are
known in advance and checked against the store.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import duckdb

from ibias.runner.config import ModelConfig, load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.base import (
    AttemptError,
    Limits,
    Provider,
    ProviderContext,
    Reply,
    Sampling,
)
from ibias.runner.providers.retries import Backoff, Classification, Verdict
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=6)
N_PROMPTS = 60


def planned_failures(i: int) -> list[str]:
    """What the first attempts at prompt i raise, in order, before it is answered."""
    failures = []
    if i % 3 == 0:
        failures.append("503")
    if i % 5 == 1:
        failures.append("429")
    if i % 7 == 2:
        failures.append("bug")
    return failures


class EchoProvider(Provider):
    """Answers "<model> says <i>" for prompt i after the failures `planned_failures(i)`."""

    def __init__(self, model: ModelConfig, fatal: bool = False) -> None:
        self.model = model
        self.fatal = fatal
        self.calls: Counter[str] = Counter()
        self.samplings: set[Sampling] = set()
        self.announced = 0
        self.started = self.closed = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def complete(self, messages: Sequence[Mapping[str, str]], sampling: Sampling) -> Reply:
        assert self.started and not self.closed
        self.samplings.add(sampling)
        text = messages[-1]["content"]
        self.calls[text] += 1
        if self.fatal:
            raise AttemptError(
                Classification(Verdict.FATAL, "auth", "HTTP 401: invalid key"), status=401
            )
        i = int(re.search(r"item p(\d+)", text).group(1))  # type: ignore[union-attr]
        failures = planned_failures(i)
        n = self.calls[text]
        if n <= len(failures):
            kind = failures[n - 1]
            if kind == "503":
                raise AttemptError(
                    Classification(Verdict.RETRY, "http_503", "HTTP 503: overloaded"), status=503
                )
            if kind == "429":
                raise AttemptError(
                    Classification(
                        Verdict.RETRY, "http_429", "HTTP 429", delay_hint_s=0.01, is_rate_limit=True
                    ),
                    status=429,
                )
            raise RuntimeError("a bug in the provider")
        return Reply(
            content=f"{self.model.id} says {i}",
            finish_reason="stop",
            refusal=None,
            prompt_tokens=12,
            completion_tokens=3,
            provider_model=f"echo-{self.model.model}",
            system_fingerprint=None,
            raw={"echo": text},
            headers={"x-echo-rpm": "60000"},
        )

    def classify_exception(self, exc: BaseException) -> Classification:
        return Classification(Verdict.RETRY, "echo_bug", f"echo: {exc}")

    def limits_from_headers(self, headers: Mapping[str, str]) -> Limits | None:
        if "x-echo-rpm" not in headers:
            return None
        self.announced += 1
        return Limits(rpm=int(headers["x-echo-rpm"]))


class Factory:
    """A `ProviderFactory` that remembers what it built."""

    def __init__(self, fatal_ids: tuple[str, ...] = ()) -> None:
        self.fatal_ids = fatal_ids
        self.built: dict[str, EchoProvider] = {}
        self.contexts: list[ProviderContext] = []

    def __call__(
        self, model: ModelConfig, api_key: str | None, context: ProviderContext
    ) -> EchoProvider:
        self.contexts.append(context)
        provider = EchoProvider(model, fatal=model.id in self.fatal_ids)
        self.built[model.id] = provider
        return provider


def _config(tmp_path, ids: Sequence[str], **keys: object):
    # Port 9 (discard) on loopback: if anything tried HTTP, it would fail and show up as
    # connection errors in the attempts, which the tests below rule out exactly.
    blocks = [
        model_block(ids[0], provider="openai", base_url="http://127.0.0.1:9/v1", model="x", **keys),
        *(model_block(m, provider="simulator", model=f"sim-{m}", **keys) for m in ids[1:]),
    ]
    return load_config(write_config(tmp_path, blocks, n_prompts=N_PROMPTS))


def _attempts(store) -> dict[tuple[str, int], list[tuple[str, str | None]]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            "SELECT t.model_id, t.coords->>'id', a.attempt_no, a.outcome, a.error_kind "
            "FROM attempts a JOIN trials t USING (trial_key) ORDER BY 1, 2, 3"
        ).fetchall()
    finally:
        con.close()
    out: dict[tuple[str, int], list[tuple[str, str | None]]] = {}
    for model_id, item, attempt_no, outcome, kind in rows:
        got = out.setdefault((model_id, int(item[1:])), [])
        assert attempt_no == len(got) + 1
        got.append((outcome, kind))
    return out


def _responses(store) -> dict[tuple[str, int], list[str]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            "SELECT t.model_id, t.coords->>'id', r.content, r.provider_model "
            "FROM trials t LEFT JOIN responses r USING (trial_key)"
        ).fetchall()
    finally:
        con.close()
    out: dict[tuple[str, int], list[str]] = {}
    for model_id, item, content, provider_model in rows:
        got = out.setdefault((model_id, int(item[1:])), [])
        if content is not None:
            got.append(f"{content} | {provider_model}")
    return out


KIND = {"503": "http_503", "429": "http_429", "bug": "echo_bug"}


async def test_every_trial_answered_once_with_its_attempts_recorded(tmp_path):
    cfg = _config(tmp_path, ["a", "b"])
    factory = Factory()
    store = tmp_path / "store.duckdb"
    result = await execute(
        cfg,
        RunOptions(store=store, quiet=True, backoff=FAST, concurrency=3),
        provider_factory=factory,
    )
    assert result.exit_code == 0, result.lines
    assert set(factory.built) == {"a", "b"}

    responses = _responses(store)
    assert len(responses) == 2 * N_PROMPTS
    for (model_id, i), contents in responses.items():
        model_name = "x" if model_id == "a" else f"sim-{model_id}"
        assert contents == [f"{model_id} says {i} | echo-{model_name}"]

    attempts = _attempts(store)
    assert len(attempts) == 2 * N_PROMPTS
    for (_, i), got in attempts.items():
        failures = planned_failures(i)
        assert got == [("retry", KIND[f]) for f in failures] + [("ok", None)]
    assert sum(len(v) for v in attempts.values()) == 2 * sum(
        len(planned_failures(i)) + 1 for i in range(N_PROMPTS)
    )

    for provider in factory.built.values():
        assert provider.started and provider.closed
        # the neutral trial params reach the provider; the --concurrency override reaches it
        assert provider.samplings == {Sampling(temperature=0.0, max_tokens=512)}
        assert provider.model.max_concurrency == 3
        # the scheduler asked the provider for limits and adopted the first it announced
        assert provider.announced == 1
    # the in-process simulator is started only when a `simulator` provider asks for it
    context = factory.contexts[0]
    assert context.simulator is not None and not context.simulator.started  # type: ignore[attr-defined]


async def test_configured_limits_are_not_asked_for(tmp_path):
    cfg = _config(tmp_path, ["a"], rpm=60_000, tpm=10_000_000)
    factory = Factory()
    result = await execute(
        cfg,
        RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST),
        provider_factory=factory,
    )
    assert result.exit_code == 0, result.lines
    assert factory.built["a"].announced == 0


async def test_a_fatal_error_of_an_injected_provider_stops_only_its_model(tmp_path):
    cfg = _config(tmp_path, ["good", "bad"])
    lines: list[str] = []
    result = await execute(
        cfg,
        RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST),
        say=lines.append,
        provider_factory=Factory(fatal_ids=("bad",)),
    )
    assert result.exit_code == 1
    assert lines == ["model bad stopped: HTTP 401: invalid key"]
    responses = _responses(tmp_path / "store.duckdb")
    assert all(len(v) == 1 for (m, _), v in responses.items() if m == "good")
    assert all(v == [] for (m, _), v in responses.items() if m == "bad")


class LimitedProvider(EchoProvider):
    """Answers every prompt only after ten 429s (a hidden limit far below the run's pace)."""

    async def complete(self, messages: Sequence[Mapping[str, str]], sampling: Sampling) -> Reply:
        text = messages[-1]["content"]
        self.calls[text] += 1
        if self.calls[text] <= 10:
            raise AttemptError(
                Classification(
                    Verdict.RETRY, "http_429", "HTTP 429", delay_hint_s=0.001, is_rate_limit=True
                ),
                status=429,
            )
        return Reply(
            content="ok",
            finish_reason="stop",
            refusal=None,
            prompt_tokens=1,
            completion_tokens=1,
            provider_model=None,
            system_fingerprint=None,
            raw={},
        )


async def test_429s_alone_never_make_a_trial_fail_for_good(tmp_path):
    """Ten 429s per trial against three attempts allowed: 429s only slow the run; the other
    failures still use up the attempts (`max_attempts`)."""
    cfg = _config(tmp_path, ["a"])
    store = tmp_path / "store.duckdb"
    result = await execute(
        cfg,
        RunOptions(
            store=store,
            quiet=True,
            backoff=Backoff(base_s=0.0001, cap_s=0.0002, max_attempts=3),
            concurrency=8,
        ),
        provider_factory=lambda m, k, c: LimitedProvider(m),
    )
    assert result.exit_code == 0, result.lines
    attempts = _attempts(store)
    assert len(attempts) == N_PROMPTS
    for got in attempts.values():
        assert got == [("retry", "http_429")] * 10 + [("ok", None)]

"""A simulated LLM provider over loopback HTTP, speaking three protocols side by side:
OpenAI chat completions (POST /v1/chat/completions), Anthropic Messages (POST /v1/messages) and
Gemini generateContent (POST /v1beta/models/{model}:generateContent), with each one's batch API.

Tests, the demo and the benchmarks need a provider that misbehaves the way real ones do
(latency, 5xx, 429 bursts, hangs, dropped connections, broken bodies, RPM/TPM enforcement)
while answering deterministically, so that a retried or resumed trial gets the same answer.
Two sources of randomness keep those apart:

* the answer is a function of (model name, messages, profile seed) only:
  `rng_for(seed, "answer", model, messages)` drives refusals, the registered experiments'
  responders and the filler text for prompts no responder knows;
* faults and latency come from one per-server request stream, so a retry can succeed.

The protocols differ only where the providers do: how a request is read (and refused when
malformed, or when the real API would refuse it: rules.py, so that a rehearsal fails where the
real run would), and how answers, refusals, errors and rate-limit hints are worded (`Dialect`).
Everything else is one simulator: a chat gets the same answer in every protocol, a model's
limits, bursts and faults are the same whichever protocol reaches it, and the counts are shared.
A profile's keys read the same in every protocol, worded as each provider words them (each
protocol module's docstring says how); `hide_limits` enforces a model's limits but announces
them nowhere (no rate-limit headers, 429s worded as a burst's).

The modules, one job each:

* `profile`: how each simulated model behaves, as a value read from a TOML file, a run's
  `[models.sim]` table or the CLI's flags;
* `provider`: the `simulator` provider a run names, which starts one in-process simulator and
  speaks to it over loopback;
* `server`: the aiohttp application, its routes and the path of an online request;
* `answer`: the shared answer path (refusals, the registered units' responders, filler,
  token counts), and the one place the units are asked (`unit_reply`, `unit_choice`);
* `protocol`: what a protocol is (`Dialect`) and the request it reads (`Ask`);
* `protocol_openai`, `protocol_anthropic`, `protocol_gemini`: one provider protocol each;
* `rules`: what the real APIs refuse (by model family, written from the providers' documents,
  never from the runner's rule table) and which models reason by default;
* `faults`: per-model state, RPM/TPM buckets, 429 bursts, the fault and latency draws;
* `logprobs`: OpenAI-style token logprobs, with the units' choice alternatives;
* `drift`: the versioned model name and its drift (`drift_after`);
* `stats`: the counters as a value (`GET /stats`);
* `batch_openai`, `batch_anthropic`, `batch_gemini`: the batch APIs, answered by the same
  path; `batch_keyed`: what the three share (key check, held replies).

The responders themselves live with their experiment units (prompts/*/simulate.py).
This package re-exports the names other code imports from `ibias.runner.simulator`, each
loaded on first use: the package's `profile` is read whenever a config has a simulated model
(`ibias plan`, `status --config`), which needs neither aiohttp nor the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ibias.runner.simulator.answer import (
        CONTENT_FILTER_SHARE,
        REFUSAL_TEXT,
        answer_for,
        estimate_tokens,
        normalize_messages,
        prompt_hash,
    )
    from ibias.runner.simulator.drift import DRIFTED_VERSION_SUFFIX, MODEL_VERSION_SUFFIX
    from ibias.runner.simulator.faults import BURST_EXTRA, BURST_S, JITTER_TOLERANCE_S
    from ibias.runner.simulator.logprobs import PLAIN_LOGPROB, token_logprobs
    from ibias.runner.simulator.protocol import Ask, Dialect
    from ibias.runner.simulator.protocol_anthropic import ANTHROPIC, ANTHROPIC_REFUSAL_EXPLANATION
    from ibias.runner.simulator.protocol_gemini import (
        GEMINI,
        GEMINI_DAILY_QUOTA_ID,
        GEMINI_DAILY_QUOTA_VALUE,
        gemini_block,
        gemini_thoughts,
    )
    from ibias.runner.simulator.protocol_openai import OPENAI, format_duration
    from ibias.runner.simulator.server import PROTOCOLS, Clock, Simulator, Sleep, serve_forever
    from ibias.runner.simulator.stats import SimStats

#: Each re-exported name -> its module in this package (imported on first use).
_LAZY: dict[str, str] = {
    "ANTHROPIC": "protocol_anthropic",
    "ANTHROPIC_REFUSAL_EXPLANATION": "protocol_anthropic",
    "Ask": "protocol",
    "BURST_EXTRA": "faults",
    "BURST_S": "faults",
    "CONTENT_FILTER_SHARE": "answer",
    "Clock": "server",
    "DRIFTED_VERSION_SUFFIX": "drift",
    "Dialect": "protocol",
    "GEMINI": "protocol_gemini",
    "GEMINI_DAILY_QUOTA_ID": "protocol_gemini",
    "GEMINI_DAILY_QUOTA_VALUE": "protocol_gemini",
    "JITTER_TOLERANCE_S": "faults",
    "MODEL_VERSION_SUFFIX": "drift",
    "OPENAI": "protocol_openai",
    "PLAIN_LOGPROB": "logprobs",
    "PROTOCOLS": "server",
    "REFUSAL_TEXT": "answer",
    "SimStats": "stats",
    "Simulator": "server",
    "Sleep": "server",
    "answer_for": "answer",
    "estimate_tokens": "answer",
    "format_duration": "protocol_openai",
    "gemini_block": "protocol_gemini",
    "gemini_thoughts": "protocol_gemini",
    "normalize_messages": "answer",
    "prompt_hash": "answer",
    "serve_forever": "server",
    "token_logprobs": "logprobs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "ANTHROPIC",
    "ANTHROPIC_REFUSAL_EXPLANATION",
    "BURST_EXTRA",
    "BURST_S",
    "CONTENT_FILTER_SHARE",
    "DRIFTED_VERSION_SUFFIX",
    "GEMINI",
    "GEMINI_DAILY_QUOTA_ID",
    "GEMINI_DAILY_QUOTA_VALUE",
    "JITTER_TOLERANCE_S",
    "MODEL_VERSION_SUFFIX",
    "OPENAI",
    "PLAIN_LOGPROB",
    "PROTOCOLS",
    "REFUSAL_TEXT",
    "Ask",
    "Clock",
    "Dialect",
    "SimStats",
    "Simulator",
    "Sleep",
    "answer_for",
    "estimate_tokens",
    "format_duration",
    "gemini_block",
    "gemini_thoughts",
    "normalize_messages",
    "prompt_hash",
    "serve_forever",
    "token_logprobs",
]

"""The one place error text is made safe to show and store: one line, no credentials, bounded.

Why here and at the source: every error message of a run (the `attempts.error_message` rows,
the line that stops a model, the status file, the final summary) is a provider
`Classification.message`, and every one of those is made by `redact` (runner/providers/retries.py
builds them; provider adapters call it for their own). Redacting there, before the message is
truncated, means no copy of it anywhere can hold a key, and a key cut in half by truncation
cannot slip through.

Answers lose the key their endpoint was sent (`redact_body`, applied by the HTTP provider to
every body it receives), so no response row holds one either.

Two kinds of secret are removed from messages:

* **the run's own keys**, by value: every configured key of `MIN_SECRET_CHARS` characters or
  more, whatever its prefix, because a server may echo a key of a format no pattern knows.
  They are registered for the length of a run with `secrets_scope`, a context variable, so the
  tasks and threads of that run see them, and another run in the same process its own;
* **anything that looks like a credential** (known key prefixes, `Bearer ...`, `key=...`),
  because a provider may echo a partly masked key or a URL with `?key=` of a key that is not
  the run's.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "redact",
    "redact_body",
    "secret_bytes",
    "secrets_scope",
]

#: Longest message stored per attempt; provider messages can be whole paragraphs.
MAX_MESSAGE_CHARS = 300
#: Shorter configured keys are not redacted by value: they would match ordinary words.
MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()

_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), Groq (gsk_), xAI (xai-), OpenRouter (sk-or-)
    re.compile(r"\b(?:sk|gsk|xai|rk|pk)[-_][A-Za-z0-9_\-*.]{6,}"),
    # Google API keys
    re.compile(r"\bAIza[0-9A-Za-z_\-]{10,}"),
    # Authorization headers echoed back
    re.compile(r"(?i)\bbearer\s+[^\s,;\"']+"),
    # keys in URLs or header-like text: key=..., api_key: ..., x-api-key=...
    re.compile(r"(?i)\b((?:x-)?(?:api[-_]?)?key|token|access_token)\s*([=:])\s*[^\s&,;\"']+"),
)

#: The configured keys of the run in this context, and one alternation of them, longest first
#: (a key that contains another is removed whole).
_SECRETS: ContextVar[tuple[frozenset[str], re.Pattern[str] | None]] = ContextVar(
    "ibias_secrets", default=(frozenset(), None)
)


@contextlib.contextmanager
def secrets_scope(values: Iterable[str | None]) -> Iterator[None]:
    """Redact `values` (those of `MIN_SECRET_CHARS` or more) from every message made in this
    context until the block ends; adds to the secrets of an enclosing scope."""
    outer = _SECRETS.get()[0]
    keys = outer | {v for v in values if v is not None and len(v) >= MIN_SECRET_CHARS}
    longest_first = sorted(keys, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(k) for k in longest_first)) if keys else None
    token = _SECRETS.set((frozenset(keys), pattern))
    try:
        yield
    finally:
        _SECRETS.reset(token)


def secret_bytes(key: str | None) -> bytes | None:
    """A configured key as `redact_body` takes it; None if it is too short to redact."""
    return key.encode() if key is not None and len(key) >= MIN_SECRET_CHARS else None


def redact_body(body: bytes, key: bytes | None) -> bytes:
    """`body` (an endpoint's answer, as received) without `key`, the key it was sent.

    Why: a server that echoes the key in a 200 would otherwise put it in `responses.raw` and
    the parsed content. Only the key the endpoint received can come back from it, so only that
    one is searched for: this runs for every answer (one substring search, about a microsecond
    for a 1 kB body). The credential-like patterns `redact` also removes are not applied: a
    model's answer may well say "token: ...".
    """
    if key is not None and key in body:
        return body.replace(key, REDACTED_BYTES)
    return body


def redact(text: str) -> str:
    """Return `text` on one line, without the run's keys or anything that looks like a
    credential, and at most `MAX_MESSAGE_CHARS` long.

    Why: provider error bodies and aiohttp exception strings can contain the request URL
    (Gemini puts the key in `?key=`), a partly masked key ("Incorrect API key provided:
    sk-proj-****abcd") or the whole key; those strings end up in the store, the status file and
    on the terminal.
    """
    out = text
    secrets = _SECRETS.get()[1]
    if secrets is not None:
        out = secrets.sub(REDACTED, out)
    out = " ".join(out.split())
    for pattern in _SECRET_PATTERNS:
        if pattern.groups >= 2:
            out = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", out)
        else:
            out = pattern.sub(REDACTED, out)
    if len(out) > MAX_MESSAGE_CHARS:
        out = out[: MAX_MESSAGE_CHARS - 1] + "…"
    return out

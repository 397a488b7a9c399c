"""Any OpenAI-compatible chat-completions endpoint (OpenAI, xAI, Groq, Together, OpenRouter,
Gemini's OpenAI endpoint, vLLM, Ollama, and ibias's own simulator).

One aiohttp session per endpoint with keep-alive and a connection pool sized to the model's
concurrency cap; the API key lives only in the session's default headers.

A model's own option `reasoning_effort` (`OpenAIConfigOptions`) is sent as the request's
`reasoning_effort`, as set.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Self
from urllib.parse import urlsplit

import msgspec
import orjson
from msgspec import Meta

from ibias.prompts.base import Message, SettingsError
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import (
    DAY_S,
    MINUTE_S,
    AttemptError,
    Limits,
    ProviderContext,
    Reply,
    Sampling,
    Window,
)
from ibias.runner.providers.http import HTTPProvider
from ibias.runner.providers.http import max_body_bytes_of as _max_body_bytes
from ibias.runner.providers.names import DEFAULT_BASE_URLS
from ibias.runner.providers.params import ParamRule, rule_for, wire_params
from ibias.runner.providers.registry import provider
from ibias.runner.providers.retries import (
    Classification,
    MalformedResponse,
    Verdict,
    classify_exception,
    classify_http,
    json_object,
    loads_json,
    parse_duration,
    redact,
)
from ibias.runner.providers.sending import SendingOptions
from ibias.runner.providers.traits import BUILTIN_TRAITS
from ibias.runner.providers.usage import token_count, token_sum

__all__ = [
    "OPENAI_PARAM_KEYS",
    "REASONING_EFFORTS",
    "NullContent",
    "OpenAIConfigOptions",
    "OpenAIProvider",
    "embedded_error",
    "logprobs_refusal",
    "openai_limits",
    "openai_sampling",
    "parse_chat_completion",
]


#: `reasoning_effort` as OpenAI documents it for chat completions (platform.openai.com/docs/
#: api-reference/chat/create: "none, minimal, low, medium, high, xhigh"; "max" on the newest
#: models; the official SDK's `ReasoningEffort`, openai 3.57, is exactly this set). Which of
#: them a model takes depends on the model (gpt-5.1 and later: none; models before it default
#: to medium and do not take none): the API answers 400 for the others.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class OpenAIConfigOptions(SendingOptions, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The openai provider's own keys in a `[[models]]` table (`Provider.options_schema`): its
    reasoning effort, and how its trials are sent (`SendingOptions`)."""

    reasoning_effort: (
        Annotated[str, Meta(pattern=r"\S", extra={"expected": "a non-empty string"})] | None
    ) = None
    #: Prompt tokens this model's live batches may hold at once: the account's "Batch queue
    #: limit" for the model (Settings > Limits); absent: a conservative default
    #: (runner/batch/limits.py `OPENAI_ENQUEUED_TOKENS`). How trials are sent, never what.
    batch_enqueued_tokens: Annotated[int, Meta(ge=1)] | None = None


def check_reasoning_effort(value: object) -> None:
    """One line naming the key for a value outside the documented set."""
    if value is not None and value not in REASONING_EFFORTS:
        raise SettingsError(
            "reasoning_effort", f"expected one of {list(REASONING_EFFORTS)}, got {value!r}"
        )


def openai_sampling(sampling: Sampling) -> dict[str, Any]:
    """The neutral parameters under OpenAI's names, in one fixed order.

    `max_tokens` rather than `max_completion_tokens`: every compatible server the README lists
    accepts it, and a trial's request body stays the same from one version of ibias to the
    next (a resumed run sends what its first part sent). Models that
    want other names or refuse some of these get them through runner/providers/params.py.
    """
    fields: dict[str, Any] = {
        "temperature": sampling.temperature,
        "max_tokens": sampling.max_tokens,
    }
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    if sampling.top_logprobs is not None:  # the model opted in (`logprobs = true`)
        fields["logprobs"] = True
        fields["top_logprobs"] = sampling.top_logprobs
    return fields


#: The window of `x-ratelimit-limit-requests` and `-tokens`, per host, where it is not the
#: minute OpenAI means. Groq sends its requests-per-day limit (RPD) under OpenAI's name, with
#: `-remaining-requests` and `-reset-requests` about that day too; its tokens are per minute.
#: Decided per host, from the provider's documentation, not guessed from the numbers.
REQUEST_TOKEN_WINDOWS: Mapping[str, tuple[float, float]] = MappingProxyType(
    {"api.groq.com": (DAY_S, MINUTE_S)}
)


def openai_limits(headers: Mapping[str, str], host: str | None = None) -> Limits | None:
    """The limits OpenAI-style headers announce: `x-ratelimit-limit-requests` / `-tokens`,
    and where each stands (`x-ratelimit-remaining-*`, `x-ratelimit-reset-*` as Go-style
    durations such as `6m0s`, `1s`, `20ms`). Per minute, as OpenAI and the simulator send
    them, unless `host` is listed in `REQUEST_TOKEN_WINDOWS` (Groq: requests per day). None
    when no limit and no remaining count is there or readable."""
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    periods = REQUEST_TOKEN_WINDOWS.get((host or "").lower(), (MINUTE_S, MINUTE_S))
    limits: dict[str, int | None] = {}
    windows: list[Window] = []
    for what, period in zip(("requests", "tokens"), periods, strict=True):
        limit = _positive_int(lower.get(f"x-ratelimit-limit-{what}"))
        limits[what] = limit
        remaining = _count(lower.get(f"x-ratelimit-remaining-{what}"))
        if remaining is not None:
            reset = lower.get(f"x-ratelimit-reset-{what}")
            windows.append(
                Window(
                    what,
                    remaining,
                    None if reset is None else parse_duration(reset),
                    limit,
                    period,
                )
            )
    if limits["requests"] is None and limits["tokens"] is None and not windows:
        return None
    per_day = periods[0] == DAY_S
    return Limits(
        rpm=None if per_day else limits["requests"],
        tpm=limits["tokens"] if periods[1] == MINUTE_S else None,
        rpd=limits["requests"] if per_day else None,
        tpd=limits["tokens"] if periods[1] == DAY_S else None,
        windows=tuple(windows),
    )


def _count(value: str | None) -> int | None:
    """A remaining count (0 included); a fractional or unreadable one is None."""
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return max(number, 0)


def _positive_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number > 0 else None


@provider("openai")
class OpenAIProvider(HTTPProvider):
    """`Provider` for POST {base_url}/chat/completions."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_connections: int,
        max_body_bytes: int | None = None,
        rule: ParamRule | None = None,
        reasoning_effort: str | None = None,
    ) -> None:
        super().__init__(
            url=self._chat_url(base_url),
            model=model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_connections=max_connections,
            max_body_bytes=max_body_bytes,
        )
        #: What this host and model accept (decided once, from the base URL and model name).
        #: `rule` is given only to speak a host's dialect at another address (tests, proxies).
        self.rule: ParamRule = rule if rule is not None else rule_for(base_url, model)
        #: The wire parameters of the last `Sampling` sent: a model's trials share one
        #: `Sampling` object, so its parameters are renamed and filtered once, not per request.
        self._wire: tuple[Sampling, dict[str, Any]] | None = None
        check_reasoning_effort(reasoning_effort)
        self.reasoning_effort = reasoning_effort

    def _wire_params(self, sampling: Sampling) -> dict[str, Any]:
        cached = self._wire
        if cached is not None and cached[0] is sampling:
            return cached[1]
        wire = wire_params(self.rule, openai_sampling(sampling))
        if self.reasoning_effort is not None:
            wire["reasoning_effort"] = self.reasoning_effort
        self._wire = (sampling, wire)
        return wire

    @staticmethod
    def _chat_url(base_url: str) -> str:
        return base_url.rstrip("/") + "/chat/completions"

    options_schema: ClassVar[type[msgspec.Struct] | None] = OpenAIConfigOptions
    #: What its models accept and need: declared once, in `BUILTIN_TRAITS`.
    traits = BUILTIN_TRAITS["openai"]

    @classmethod
    def rehearsal_path(cls, model: ModelConfig) -> str | None:
        """The simulator speaks OpenAI's chat completions (and batches) under /v1."""
        del model
        return "/v1"

    @classmethod
    def check_options(cls, options: Any) -> None:
        check_reasoning_effort(getattr(options, "reasoning_effort", None))

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        base_url = model.base_url or DEFAULT_BASE_URLS["openai"]
        return cls(
            base_url=base_url,
            model=model.model,
            api_key=api_key,
            timeout_s=model.timeout_s,
            max_connections=model.max_concurrency,
            max_body_bytes=_max_body_bytes(model),
            rule=rule_for(
                base_url,
                model.model,
                reasoning=model.reasoning,
                send_temperature=model.send_temperature,
            ),
            reasoning_effort=model.options.get("reasoning_effort"),
        )

    def session_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def request_body(self, messages: Sequence[Message], sampling: Sampling) -> dict[str, Any]:
        """The chat-completions body of one trial: what `complete` posts, and what a batch
        line carries as its `body` (runner/batch/openai.py), so a trial is the same request
        whichever way it is sent."""
        return {
            "model": self.model,
            "messages": list(messages),
            **self._wire_params(sampling),
        }

    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        status, headers, body = await self.post(self.request_body(messages, sampling))
        verdict = self.classify_response(status, headers, body)
        if verdict.verdict is not Verdict.OK:
            if sampling.top_logprobs is not None:
                verdict = logprobs_refusal(status, body) or verdict
            raise AttemptError(verdict, status=status, headers=headers)
        try:
            reply = parse_chat_completion(
                body,
                status,
                headers,
                reasoning_separate=self.rule.reasoning_tokens_separate,
                logprobs=sampling.top_logprobs is not None,
            )
        except NullContent as exc:
            raise AttemptError(
                Classification(Verdict.RETRY, "null_content", str(exc)),
                status=status,
                headers=headers,
                fallback=exc.reply,
            ) from None
        except MalformedResponse as exc:
            # Looked at only when the body is no completion, so answers are parsed once.
            embedded = embedded_error(status, headers, body)
            raise AttemptError(
                embedded or self.classify_exception(exc), status=status, headers=headers
            ) from None
        if sampling.top_logprobs is not None and reply.logprobs is None and reply.content:
            # The key promises logprobs: an endpoint that ignores the parameter would fill the
            # store with trials that cannot be analysed as asked, so the model stops at once.
            raise AttemptError(
                Classification(
                    Verdict.FATAL,
                    "logprobs_missing",
                    "the endpoint answered without the token logprobs asked for (it ignores "
                    "`logprobs`); remove logprobs = true for this model",
                ),
                status=status,
                headers=headers,
            )
        return reply

    def classify_response(
        self, status: int, headers: Mapping[str, str], body: bytes
    ) -> Classification:
        """OpenAI's dialect of statuses and error bodies: runner/providers/retries.py's table, a
        refused parameter named with the keys of an OpenAI-compatible model."""
        return classify_http(status, headers, body, now=time.time(), param_keys=OPENAI_PARAM_KEYS)

    def classify_exception(self, exc: BaseException) -> Classification:
        return classify_exception(exc)

    def limits_from_headers(self, headers: Mapping[str, str]) -> Limits | None:
        """`openai_limits`, read with this endpoint's host (see `REQUEST_TOKEN_WINDOWS`)."""
        return openai_limits(headers, urlsplit(self.url).hostname)


#: What an OpenAI-compatible model's config changes when its host refuses a parameter by name
#: (runner/providers/retries.py `param_refusal`): a refused temperature is most often an
#: OpenAI-style reasoning model under a name the rule table does not know
#: (runner/providers/params.py).
OPENAI_PARAM_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "temperature": "set reasoning = true for this model (an OpenAI-style reasoning model) "
        "or send_temperature = false",
    }
)


def embedded_error(status: int, headers: Mapping[str, str], body: bytes) -> Classification | None:
    """The classification of an error object sent with a 2xx status, or None if the body holds
    none.

    Gemini's OpenAI endpoint sends its errors as a JSON array of error objects
    (`[{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [...]}}]`); with an
    error status runner/providers/retries.py reads that array like any error body. Some hosts send
    an error object, or such an array, with a 200 instead of a completion (OpenRouter for
    upstream failures): that body is classified as the HTTP status its `code` names, so a quota
    error stays a quota error rather than a malformed completion retried eight times. Without a
    usable code it is a malformed answer, retried, with the provider's message kept.
    """
    if not body or body.lstrip()[:1] not in (b"[", b"{"):
        return None
    try:
        data = loads_json(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, list):
        data = next((d for d in data if isinstance(d, dict) and "error" in d), None)
    if not isinstance(data, dict) or "error" not in data or "choices" in data:
        return None
    err = data["error"]
    code = err.get("code") if isinstance(err, dict) else None
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        inner = classify_http(code, headers, body, now=time.time(), param_keys=OPENAI_PARAM_KEYS)
        return Classification(
            inner.verdict,
            inner.kind,
            redact(f"{inner.message} (sent with HTTP {status})"),
            inner.delay_hint_s,
            inner.is_rate_limit,
        )
    text = err.get("message") if isinstance(err, dict) else err
    return Classification(
        Verdict.RETRY, "malformed", redact(f"HTTP {status} body is an error: {text}")
    )


def logprobs_refusal(status: int, body: bytes) -> Classification | None:
    """A client error that refuses the `logprobs`/`top_logprobs` parameters, as a fatal
    classification telling what to change; None for any other answer.

    OpenAI names the parameter (`{"error": {"param": "logprobs", "type":
    "invalid_request_error", ...}}`); other compatible servers only say it in the message (vLLM
    sends the error object at the top level, `{"object": "error", "message": ...}`). Such
    an error is fatal anyway (a 400 does not go away), but its message must say that the
    model's opt-in is what the endpoint refuses, so the user knows the one key to change.
    """
    if not 400 <= status < 500 or status in (408, 409, 425, 429):
        return None
    try:
        data = loads_json(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, list):
        data = next((d for d in data if isinstance(d, dict) and "error" in d), None)
    err = data.get("error") if isinstance(data, dict) else None
    if err is None and isinstance(data, dict):
        err = data  # vLLM: {"object": "error", "message": ..., "param": ...} at the top
    if isinstance(err, dict):
        param = err.get("param")
        message = err.get("message")
    else:
        param, message = None, err
    named = isinstance(param, str) and "logprobs" in param.lower()
    said = isinstance(message, str) and "logprobs" in message.lower()
    if not (named or said):
        return None
    detail = message if isinstance(message, str) and message else f"param {param}"
    return Classification(
        Verdict.FATAL,
        "logprobs_refused",
        redact(
            f"HTTP {status}: the endpoint refuses logprobs ({detail}); remove logprobs = true "
            "for this model"
        ),
    )


def _token_logprobs(choice: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...] | None:
    """`choice.logprobs.content` as sent (a list of token objects), or None when absent."""
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list):
        return None
    return tuple(t for t in content if isinstance(t, dict))


def parse_chat_completion(
    body: bytes,
    status: int,
    headers: Mapping[str, str],
    *,
    reasoning_separate: bool = False,
    logprobs: bool = False,
) -> Reply:
    """Read the fields ibias stores from a chat.completion body.

    Reasoning: the message's `reasoning_content` (DeepSeek, xAI, vLLM; `reasoning` on
    OpenRouter and Groq) is kept as `Reply.reasoning`, never as the reply; its tokens are
    counted as `_token_counts` says.

    Only a body that cannot be a completion is malformed; an empty content with a
    `content_filter` or `length` finish reason, a `refusal`, or an empty string is a
    legitimate answer. A message with neither content nor refusal whose finish reason is
    `stop` answered nothing (most likely a server fault, not the model's answer): it raises
    `NullContent`, which carries the reply, so the trial is retried, and the reply is stored
    as empty (`outcome_reason` `null_content`, store/outcome.py) when its retries run out,
    rather than the trial ending with nothing stored.

    Token logprobs (`logprobs`: they were asked for) are taken out of the body into
    `Reply.logprobs`, so `raw` does not hold them a second time (they are most of its bytes).
    """
    data = json_object(body, status, "completion")
    choice, message = _first_choice(data)
    content = _message_content(message)
    refusal = message.get("refusal")
    finish_reason = _opt_str(choice.get("finish_reason"))
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    prompt_tokens, completion_tokens, reasoning_tokens = _token_counts(usage, reasoning_separate)
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    tokens = _token_logprobs(choice) if logprobs else None
    if tokens is not None:
        del choice["logprobs"]  # kept once, in responses.logprobs
    reply = Reply(
        content=content,
        finish_reason=finish_reason,
        refusal=_opt_str(refusal),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        provider_model=_opt_str(data.get("model")),
        system_fingerprint=_opt_str(data.get("system_fingerprint")),
        raw=data,
        status=status,
        headers=headers,
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        reasoning_tokens=reasoning_tokens,
        cache_read_tokens=_cached_tokens(usage),
        logprobs=tokens,
    )
    if content is None and refusal is None and finish_reason == "stop":
        raise NullContent(reply)
    return reply


class NullContent(MalformedResponse):
    """A completion whose message has neither content nor refusal, with finish reason `stop`
    (no tool call either: ibias asks for none). Retried like any malformed answer (a server
    that stopped without a word is most likely at fault), but `reply`, the answer as parsed,
    is stored as empty when the trial's retries run out (`AttemptError.fallback`)."""

    def __init__(self, reply: Reply) -> None:
        super().__init__("completion has no content and no refusal (finish_reason stop)")
        self.reply = reply


def _first_choice(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The completion's first choice and its message; a body without them is malformed."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("completion has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedResponse("completion choice has no message")
    return choice, message


def _message_content(message: Mapping[str, Any]) -> str | None:
    """The message's text: a string, None, or content parts (some compatible servers send
    them) joined; anything else is malformed."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise MalformedResponse("completion content is not text")


def _token_counts(
    usage: Mapping[str, Any], reasoning_separate: bool
) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and reasoning tokens from `usage`, each checked
    (runner/providers/usage.py: anything but a count the store can hold is unknown, None, and
    so is a sum that would not fit).

    Reasoning tokens (`usage.completion_tokens_details.reasoning_tokens`) are billed as
    output: OpenAI and DeepSeek count them inside `completion_tokens`, xAI (and Gemini's
    OpenAI endpoint, which may not report them at all) outside it. `total_tokens` settles it:
    whatever it counts beyond prompt and completion tokens is output the completion count left
    out, added to the completion tokens (and taken as the reasoning tokens when none are
    reported); without a total, the host's rule (`reasoning_separate`) decides."""
    prompt_tokens = token_count(usage.get("prompt_tokens"))
    completion_tokens = token_count(usage.get("completion_tokens"))
    details = usage.get("completion_tokens_details")
    reasoning_tokens = (
        token_count(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    )
    total = token_count(usage.get("total_tokens"))
    if completion_tokens is not None and prompt_tokens is not None and total is not None:
        hidden = total - prompt_tokens - completion_tokens
        if hidden > 0:  # output the completion count leaves out: the reasoning
            completion_tokens = token_sum(completion_tokens, hidden)
            reasoning_tokens = reasoning_tokens or hidden
    elif reasoning_tokens and completion_tokens is not None and reasoning_separate:
        completion_tokens = token_sum(completion_tokens, reasoning_tokens)
    return prompt_tokens, completion_tokens, reasoning_tokens


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _cached_tokens(usage: Mapping[str, Any]) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens` (inside `prompt_tokens`), checked."""
    details = usage.get("prompt_tokens_details")
    return token_count(details.get("cached_tokens")) if isinstance(details, dict) else None

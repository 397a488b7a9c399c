"""Retry policy: real-looking provider answers in, the verdict a user would expect out."""

from __future__ import annotations

import asyncio
import random
import statistics
from datetime import UTC, datetime
from email.utils import format_datetime
from fractions import Fraction

import aiohttp
import orjson
import pytest
import yarl
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy
from scipy import stats

from ibias.runner.providers.retries import (
    MAX_HINT_S,
    Backoff,
    Classification,
    MalformedResponse,
    Verdict,
    classify_exception,
    classify_http,
    parse_duration,
    redact,
    retry_delay_hint,
)

NOW = 1_700_000_000.0  # fixed wall clock for HTTP-date arithmetic


def _json(obj: object) -> bytes:
    return orjson.dumps(obj)


def _iso(offset_s: float) -> str:
    return datetime.fromtimestamp(NOW + offset_s, UTC).isoformat().replace("+00:00", "Z")


def _gemini_429(quota_id: str, retry_delay: str | None = "13s") -> bytes:
    details: list[dict[str, object]] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/"
                    "generate_content_free_tier_requests",
                    "quotaId": quota_id,
                    "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
                    "quotaValue": "15",
                }
            ],
        },
        {
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [{"description": "Learn more", "url": "https://ai.google.dev/x"}],
        },
    ]
    if retry_delay is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        )
    return _json(
        {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota, please check your plan and "
                "billing details.",
                "status": "RESOURCE_EXHAUSTED",
                "details": details,
            }
        }
    )


OPENAI_TPM_429 = _json(
    {
        "error": {
            "message": "Rate limit reached for gpt-4o-mini in organization org-abc on tokens "
            "per min (TPM): Limit 200000, Used 199800, Requested 1000. Please try again in "
            "240ms. Visit https://platform.openai.com/account/rate-limits to learn more.",
            "type": "tokens",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
)
OPENAI_HEADERS = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-limit-tokens": "200000",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-requests": "6m0s",  # budget left: must not be waited for
    "x-ratelimit-reset-tokens": "1.5s",
}
OPENAI_QUOTA = _json(
    {
        "error": {
            "message": "You exceeded your current quota, please check your plan and billing "
            "details.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
)
OPENAI_BAD_KEY = _json(
    {
        "error": {
            "message": "Incorrect API key provided: sk-proj-abcdefghijklmnop********wxyz. You "
            "can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
)
OPENAI_NO_MODEL = _json(
    {
        "error": {
            "message": "The model `gpt-9` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }
)
OPENAI_500 = _json(
    {
        "error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
)
ANTHROPIC_529 = _json(
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
)
ANTHROPIC_429 = _json(
    {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "This request would exceed the rate limit for your organization of 50 "
            "requests per minute.",
        },
    }
)
ANTHROPIC_CREDIT = _json(
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "Your credit balance is too low to access the Anthropic API.",
        },
    }
)
ANTHROPIC_AUTH = _json(
    {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
)
ANTHROPIC_403 = _json(
    {
        "type": "error",
        "error": {"type": "permission_error", "message": "Your API key does not have access"},
    }
)
GEMINI_BAD_KEY = _json(
    {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                }
            ],
        }
    }
)
GEMINI_404 = _json(
    {
        "error": {
            "code": 404,
            "message": "models/gemini-9 is not found for API version v1beta.",
            "status": "NOT_FOUND",
        }
    }
)
GEMINI_503 = _json(
    {
        "error": {
            "code": 503,
            "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE",
        }
    }
)
GROQ_TPM = _json(
    {
        "error": {
            "message": "Rate limit reached for model `llama-3.3-70b-versatile` in organization "
            "`org_01abc` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Used "
            "5800, Requested 900. Please try again in 7.66s. Visit "
            "https://console.groq.com/docs/rate-limits for more information.",
            "type": "tokens",
            "code": "rate_limit_exceeded",
        }
    }
)
GROQ_HEADERS = {
    "retry-after": "8",
    "x-ratelimit-limit-requests": "14400",  # Groq: requests per DAY
    "x-ratelimit-remaining-requests": "14370",
    "x-ratelimit-reset-requests": "2m59.56s",
    "x-ratelimit-remaining-tokens": "5200",
    "x-ratelimit-reset-tokens": "7.66s",
}
GROQ_RPD = _json(
    {
        "error": {
            "message": "Rate limit reached for model `llama-3.1-8b-instant` in organization "
            "`org_01abc` service tier `on_demand` on requests per day (RPD): Limit 14400, Used "
            "14400, Requested 1. Please try again in 6s.",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    }
)


# (case id, status, headers, body, verdict, kind, hint, is_rate_limit)
CASES: list[tuple[str, int, dict[str, str], bytes, Verdict, str, float | None, bool]] = [
    ("openai-200", 200, {}, b'{"choices": []}', Verdict.OK, "ok", None, False),
    (
        "openai-429-tpm",
        429,
        {**OPENAI_HEADERS, "Retry-After": "2"},
        OPENAI_TPM_429,
        Verdict.RETRY,
        "http_429",
        2.0,
        True,
    ),
    (
        "openai-429-tpm-no-retry-after",
        429,
        OPENAI_HEADERS,
        OPENAI_TPM_429,
        Verdict.RETRY,
        "http_429",
        1.5,
        True,
    ),
    (
        "openai-insufficient-quota",
        429,
        {},
        OPENAI_QUOTA,
        Verdict.FATAL,
        "insufficient_quota",
        None,
        False,
    ),
    ("openai-401", 401, {}, OPENAI_BAD_KEY, Verdict.FATAL, "auth", None, False),
    ("openai-404", 404, {}, OPENAI_NO_MODEL, Verdict.FATAL, "not_found", None, False),
    ("openai-500", 500, {}, OPENAI_500, Verdict.RETRY, "http_500", None, False),
    ("openai-408", 408, {}, b"", Verdict.RETRY, "http_408", None, False),
    ("openai-409", 409, {}, b"", Verdict.RETRY, "http_409", None, False),
    ("openai-402", 402, {}, b"", Verdict.FATAL, "payment_required", None, False),
    ("anthropic-529", 529, {}, ANTHROPIC_529, Verdict.RETRY, "http_529", None, False),
    (
        "anthropic-429",
        429,
        {
            "retry-after": "14",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": _iso(20),
            "anthropic-ratelimit-tokens-remaining": "39000",
            "anthropic-ratelimit-tokens-reset": _iso(600),  # budget left: ignored
        },
        ANTHROPIC_429,
        Verdict.RETRY,
        "http_429",
        20.0,
        True,
    ),
    ("anthropic-credit", 400, {}, ANTHROPIC_CREDIT, Verdict.FATAL, "bad_request", None, False),
    ("anthropic-401", 401, {}, ANTHROPIC_AUTH, Verdict.FATAL, "auth", None, False),
    ("anthropic-403", 403, {}, ANTHROPIC_403, Verdict.FATAL, "forbidden", None, False),
    (
        "gemini-429-per-minute",
        429,
        {},
        _gemini_429("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
        Verdict.RETRY,
        "http_429",
        13.0,
        True,
    ),
    (
        "gemini-429-per-day",
        429,
        {},
        _gemini_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "27s"),
        Verdict.FATAL,
        "daily_quota",
        None,
        False,
    ),
    (
        "gemini-429-list-wrapped",
        429,
        {},
        b"[" + _gemini_429("GenerateRequestsPerMinutePerProjectPerModel", "0.5s") + b"]",
        Verdict.RETRY,
        "http_429",
        0.5,
        True,
    ),
    ("gemini-400-bad-key", 400, {}, GEMINI_BAD_KEY, Verdict.FATAL, "auth", None, False),
    ("gemini-404", 404, {}, GEMINI_404, Verdict.FATAL, "not_found", None, False),
    ("gemini-503", 503, {}, GEMINI_503, Verdict.RETRY, "http_503", None, False),
    ("groq-429-tpm", 429, GROQ_HEADERS, GROQ_TPM, Verdict.RETRY, "http_429", 8.0, True),
    ("groq-429-rpd", 429, {}, GROQ_RPD, Verdict.FATAL, "daily_quota", None, False),
    (
        "proxy-502-html",
        502,
        {"Content-Type": "text/html"},
        b"<html><head><title>502 Bad Gateway</title></head></html>",
        Verdict.RETRY,
        "http_502",
        None,
        False,
    ),
    ("vllm-422", 422, {}, b'{"detail": "bad field"}', Verdict.FATAL, "http_422", None, False),
    (
        "ollama-404",
        404,
        {},
        b'{"error": "model \'x\' not found"}',
        Verdict.FATAL,
        "not_found",
        None,
        False,
    ),
]


@pytest.mark.parametrize(
    ("status", "headers", "body", "verdict", "kind", "hint", "rate_limit"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_classify_http_table(status, headers, body, verdict, kind, hint, rate_limit):
    got = classify_http(status, headers, body, now=NOW)
    assert (got.verdict, got.kind, got.is_rate_limit) == (verdict, kind, rate_limit)
    if hint is None:
        assert got.delay_hint_s is None
    else:
        assert got.delay_hint_s == pytest.approx(hint)
    assert "\n" not in got.message
    assert str(status) in got.message


def test_messages_carry_the_provider_reason_but_no_key():
    got = classify_http(401, {"Authorization": "Bearer sk-live-123456789"}, OPENAI_BAD_KEY)
    assert "Incorrect API key provided" in got.message
    assert "sk-proj" not in got.message
    assert "sk-live" not in got.message
    assert "abcdefgh" not in got.message


def test_headers_are_case_insensitive_and_multidicts_work():
    for headers in (
        {"RETRY-AFTER": "7"},
        {"Retry-After": "7"},
        CIMultiDictProxy(CIMultiDict({"retry-after": "7"})),
    ):
        assert classify_http(503, headers, b"", now=NOW).delay_hint_s == 7.0


def test_hints_past_a_year_and_negative_dates_are_ignored():
    """A hint of a day or more is kept (the scheduler stops the model past its outage limit,
    saying until when); only one past a year is garbage."""
    past = format_datetime(datetime.fromtimestamp(NOW - 30, UTC), usegmt=True)
    assert retry_delay_hint({"retry-after": past}, b"", now=NOW) is None
    assert retry_delay_hint({"retry-after": "90000"}, b"", now=NOW) == 90_000.0
    assert retry_delay_hint({"retry-after": str(400 * 86_400)}, b"", now=NOW) is None
    assert retry_delay_hint({"retry-after": "-3"}, b"", now=NOW) is None
    assert retry_delay_hint({"retry-after": "soon"}, b"", now=NOW) is None
    # the garbage is ignored, the sensible value kept
    assert retry_delay_hint({"retry-after": "soon", "retry-after-ms": "1500"}, b"") == 1.5


def test_hint_is_the_maximum_of_what_is_asked():
    headers = {
        "retry-after-ms": "2500",
        "retry-after": "1",
        "x-ratelimit-reset-requests": "3s",  # no remaining header: counts
    }
    assert retry_delay_hint(headers, _gemini_429("PerMinute", "4s"), now=NOW) == 4.0
    assert retry_delay_hint(headers, b"", now=NOW) == 3.0
    assert retry_delay_hint({}, b"", now=NOW) is None


# ------------------------------------------------------------------ parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6m0s", 360.0),
        ("1s", 1.0),
        ("12ms", 0.012),
        ("1m30.5s", 90.5),
        ("0.5s", 0.5),
        ("2h", 7200.0),
        ("2m59.56s", 179.56),
        ("1.000340s", 1.00034),
        ("0.5", 0.5),
        ("30", 30.0),
        (" 7s ", 7.0),
        ("1h2m3s4ms", 3723.004),
        ("500us", 0.0005),
    ],
)
def test_parse_duration_examples(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-15)


@pytest.mark.parametrize(
    "text", ["", "   ", "abc", "5x", "-1s", "1h-2m", "1.2.3s", "s", "1 s", "nan", "inf", "1s!"]
)
def test_parse_duration_rejects_garbage(text):
    assert parse_duration(text) is None


@st.composite
def _durations(draw: st.DrawFn) -> tuple[str, float]:
    """A Go-style duration string with random h/m/s/ms parts, and its exact value."""
    parts: list[tuple[str, Fraction]] = []
    units = draw(
        st.lists(st.sampled_from(["h", "m", "s", "ms"]), min_size=1, max_size=4, unique=True)
    )
    for unit in ["h", "m", "s", "ms"]:
        if unit not in units:
            continue
        whole = draw(st.integers(0, 10_000))
        decimals = draw(st.integers(0, 3))
        frac = draw(st.integers(0, 10**decimals - 1)) if decimals else 0
        text = f"{whole}.{frac:0{decimals}d}" if decimals else str(whole)
        scale: dict[str, Fraction] = {
            "h": Fraction(3600),
            "m": Fraction(60),
            "s": Fraction(1),
            "ms": Fraction(1, 1000),
        }
        parts.append((f"{text}{unit}", Fraction(text) * scale[unit]))
    return "".join(p[0] for p in parts), float(sum(p[1] for p in parts))


@given(_durations())
def test_parse_duration_round_trips_exactly(case):
    text, seconds = case
    assert parse_duration(text) == seconds


@given(st.integers(0, 86_400))
def test_retry_after_seconds(seconds):
    assert retry_delay_hint({"Retry-After": str(seconds)}, b"", now=NOW) == float(seconds)


@given(st.integers(-3_600, 400 * 86_400))
def test_retry_after_http_date(offset):
    date = format_datetime(datetime.fromtimestamp(NOW + offset, UTC), usegmt=True)
    got = retry_delay_hint({"Retry-After": date}, b"", now=NOW)
    if 0 <= offset <= MAX_HINT_S:
        assert got == float(offset)
    else:
        assert got is None


# ------------------------------------------------------------------ exceptions


def _decode_error() -> orjson.JSONDecodeError:
    try:
        orjson.loads(b'{"choices": [')
    except orjson.JSONDecodeError as exc:
        return exc
    raise AssertionError("orjson accepted a truncated body")


@pytest.mark.parametrize(
    ("exc", "verdict", "kind"),
    [
        (TimeoutError(), Verdict.RETRY, "timeout"),  # asyncio.TimeoutError is this class
        (TimeoutError("read timed out"), Verdict.RETRY, "timeout"),
        (
            aiohttp.ServerTimeoutError("Timeout on reading data from socket"),
            Verdict.RETRY,
            "timeout",
        ),
        (aiohttp.ServerDisconnectedError(), Verdict.RETRY, "connection"),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), Verdict.RETRY, "connection"),
        (
            aiohttp.ClientPayloadError("Response payload is not completed"),
            Verdict.RETRY,
            "connection",
        ),
        (ConnectionResetError(104, "reset"), Verdict.RETRY, "connection"),
        (MalformedResponse("no choices in body"), Verdict.RETRY, "malformed"),
        (_decode_error(), Verdict.RETRY, "malformed"),
        (ValueError("bad"), Verdict.RETRY, "malformed"),
        (aiohttp.InvalidURL("not a url"), Verdict.FATAL, "bad_request"),
        (KeyError("choices"), Verdict.FATAL, "internal"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_classify_exception(exc, verdict, kind):
    got = classify_exception(exc)
    assert (got.verdict, got.kind) == (verdict, kind)
    assert type(exc).__name__ in got.message


@pytest.mark.parametrize("exc", [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(1)])
def test_cancellation_is_never_classified(exc):
    with pytest.raises(type(exc)):
        classify_exception(exc)


def test_client_response_error_uses_status_and_hides_key_in_url():
    url = yarl.URL(
        "https://generativelanguage.googleapis.com/v1beta/m:gen?key=AIzaSyA-s3cr3t-v4lue-0123"
    )
    info = aiohttp.RequestInfo(url, "POST", CIMultiDictProxy(CIMultiDict()), url)
    exc = aiohttp.ClientResponseError(
        info,
        (),
        status=429,
        message="Too Many Requests",
        headers=CIMultiDictProxy(CIMultiDict({"Retry-After": "3"})),
    )
    got = classify_exception(exc)
    assert got == Classification(Verdict.RETRY, "http_429", got.message, 3.0, True)
    assert "s3cr3t" not in got.message
    assert "AIza" not in got.message


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Incorrect API key provided: sk-ant-api03-AbCdEf123456", "AbCdEf123456"),
        ("header Authorization: Bearer gsk_abcdefghijkl", "abcdefghijkl"),
        ("url ?key=AIzaSyD-0123456789abcdef&alt=sse", "0123456789abcdef"),
        ("x-api-key: xai-abcdef123456", "abcdef123456"),
    ],
)
def test_redact_removes_secrets(text, secret):
    assert secret not in redact(text)
    assert "[redacted]" in redact(text)


def test_redact_keeps_ordinary_text_and_shortens():
    assert redact("max_tokens: 4096 is too large") == "max_tokens: 4096 is too large"
    assert len(redact("x" * 5000)) <= 300
    assert redact("two\nlines") == "two lines"


# ------------------------------------------------------------------ backoff


def test_backoff_windows_grow_exponentially_to_the_cap():
    b = Backoff(base_s=1.0, cap_s=60.0)
    assert [b.window(a) for a in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert b.window(10_000) == 60.0  # no overflow on absurd attempt numbers


def test_backoff_delays_stay_within_the_window():
    b = Backoff(base_s=0.5, cap_s=20.0)
    rng = random.Random(1)
    for attempt in range(1, 15):
        for _ in range(200):
            d = b.delay(attempt, None, rng)
            assert 0.0 <= d <= min(20.0, 0.5 * 2 ** (attempt - 1))


def test_backoff_honours_a_hint_with_a_little_jitter():
    b = Backoff(base_s=1.0, cap_s=60.0, hint_jitter=0.1)
    rng = random.Random(2)
    draws = [b.delay(1, 13.0, rng) for _ in range(2000)]
    assert min(draws) >= 13.0
    assert max(draws) <= 13.0 * 1.1
    assert statistics.pstdev(draws) > 0.1  # a herd told "13 s" does not return together
    # a hint beyond the cap still wins: the provider knows its own limits
    assert b.delay(1, 300.0, rng) >= 300.0
    # a tiny hint does not undercut the exponential backoff of a late attempt
    late = [b.delay(8, 0.01, rng) for _ in range(2000)]
    assert statistics.mean(late) == pytest.approx(30.0, abs=2.0)


def test_backoff_is_deterministic_with_a_seeded_rng():
    b = Backoff()
    first = [b.delay(a, h, random.Random(7)) for a, h in [(1, None), (5, None), (3, 2.0)]]
    again = [b.delay(a, h, random.Random(7)) for a, h in [(1, None), (5, None), (3, 2.0)]]
    assert first == again
    seq1 = random.Random(9)
    seq2 = random.Random(9)
    assert [b.delay(4, None, seq1) for _ in range(50)] == [
        b.delay(4, None, seq2) for _ in range(50)
    ]


def test_backoff_is_full_jitter():
    """Uniform over [0, window]: not equal jitter (which never goes below window/2)."""
    b = Backoff(base_s=1.0, cap_s=60.0)
    rng = random.Random(12345)
    n = 20_000
    draws = [b.delay(10, None, rng) for _ in range(n)]
    # Uniform(0, 60) has mean 30 and sd 60/sqrt(12) = 17.3, so the mean of 20,000 draws has a
    # standard error of 0.12; 0.6 is five standard errors (the seed is fixed anyway).
    assert statistics.mean(draws) == pytest.approx(30.0, abs=0.6)
    # A quarter of full-jitter draws fall below 15 s (sd of that share: 0.003); equal jitter
    # would give none.
    assert sum(d < 15.0 for d in draws) / n == pytest.approx(0.25, abs=0.015)
    assert stats.kstest([d / 60.0 for d in draws], "uniform").pvalue > 1e-3


def test_backoff_attempt_budget_and_validation():
    b = Backoff(max_attempts=3)
    assert [b.exhausted(n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    with pytest.raises(ValueError):
        Backoff(base_s=0)
    with pytest.raises(ValueError):
        Backoff(base_s=10, cap_s=1)
    with pytest.raises(ValueError):
        Backoff(max_attempts=0)
    with pytest.raises(ValueError):
        b.window(0)


# --- a refused parameter, named (issue 33) ----------------------------------------------------


def _openai_error(message: str, param: str | None = None) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return orjson.dumps({"error": error})


@pytest.mark.parametrize(
    ("status", "body", "param", "key"),
    [
        (  # Anthropic, Claude Opus 4.7 and later
            400,
            b'{"type":"error","error":{"type":"invalid_request_error",'
            b'"message":"`temperature` is deprecated for this model."}}',
            "temperature",
            "set send_temperature = false",
        ),
        (  # OpenAI reasoning models
            400,
            _openai_error(
                "Unsupported value: 'temperature' does not support 0 with this model. Only the "
                "default (1) value is supported.",
                "temperature",
            ),
            "temperature",
            "set send_temperature = false",
        ),
        (
            400,
            _openai_error(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                "'max_completion_tokens' instead."
            ),  # no `param`: read from the message, the first name it gives
            "max_tokens",
            "set reasoning = true",
        ),
        (  # a chat server that knows no reasoning parameter
            400,
            _openai_error("Unrecognized request argument supplied: max_completion_tokens"),
            "max_completion_tokens",
            "set reasoning = false",
        ),
        (
            400,
            _openai_error("This model does not support the logprobs parameter", "logprobs"),
            "logprobs",
            "set logprobs = false",
        ),
        (  # Gemini, through its OpenAI endpoint too (a list of one error)
            400,
            b'[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name '
            b'\\"thinkingConfig\\" at \'generation_config\': Cannot find field.",'
            b'"status":"INVALID_ARGUMENT"}}]',
            "thinking",
            "remove thinking_budget",
        ),
        (  # a pydantic proxy
            422,
            b'{"detail":"seed: Extra inputs are not permitted"}',
            "seed",
            "remove sampling_seed",
        ),
    ],
)
def test_a_400_naming_a_refused_parameter_names_the_key_that_changes_it(status, body, param, key):
    cls = classify_http(status, {}, body)
    assert (cls.verdict, cls.kind) == (Verdict.FATAL, "param_refused")
    assert cls.message.startswith(f"HTTP {status}: the model refuses `{param}`: {key}")
    assert "\n" not in cls.message


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, _openai_error("max_tokens: 100000 > 64000, which is the maximum allowed")),
        (400, _openai_error("messages: roles must alternate between user and assistant")),
        (400, _openai_error("Unsupported parameter: 'top_p' is not supported", "top_p")),
        (429, _openai_error("temperature is not supported right now, slow down")),
        (404, _openai_error("The model `gpt-9` does not exist", "model")),
    ],
)
def test_other_client_errors_are_not_read_as_a_refused_parameter(status, body):
    """A value out of range, another field, a parameter ibias never sends (no key changes it)
    and other statuses keep their classification."""
    assert classify_http(status, {}, body).kind != "param_refused"


def test_the_hint_survives_a_long_provider_message():
    cls = classify_http(400, {}, _openai_error("x" * 5000 + " temperature", "temperature"))
    assert "set send_temperature = false" in cls.message

"""Which request parameters each OpenAI-compatible host and model family accepts.

Why a table rather than trial and error: a parameter a model rejects is a 400 that stops the
model (runner/retries.py), and retrying without it would make what was sent depend on what
failed. Reasoning models reject parameters their chat siblings take, and each host words it
differently, so the body a trial sends is decided here, once, from the host (the base URL) and
the model name, and a config asking for a value the model cannot honour is refused when the
config is read (`check_sampling`), not after planning 100,000 trials.

The facts (documented by each host; kept with the rule as `source`):

* OpenAI reasoning models (o1, o3, o4-mini and later o-series; gpt-5 and its -mini/-nano, not
  the -chat variants): `max_tokens` is refused ("Use 'max_completion_tokens' instead", which
  also bounds the reasoning tokens), and `temperature` accepts only its default, 1 ("Only the
  default (1) value is supported"); top_p, penalties and logprobs are refused too.
* xAI reasoning models (grok-3-mini, grok-4 and its -fast/-code variants): presence_penalty,
  frequency_penalty and stop are refused, and grok-4 refuses reasoning_effort.
* DeepSeek's reasoner (deepseek-reasoner): temperature, top_p and the penalties are accepted
  but have no effect; logprobs is refused.

ibias sends only the neutral parameters (temperature, max_tokens, seed); a rule's `rejects`
still lists every parameter the host refuses so that a parameter added later is dropped by the
same table. The trial key is unaffected: it hashes the neutral parameters of the config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlparse

__all__ = [
    "HOSTS",
    "RULES",
    "ParamRule",
    "check_sampling",
    "host_of",
    "rule_for",
    "wire_params",
]

#: Host name (or its suffix) -> the host family the rules are written for.
HOSTS: Mapping[str, str] = MappingProxyType(
    {
        "api.openai.com": "openai",
        "api.x.ai": "xai",
        "api.deepseek.com": "deepseek",
        "api.groq.com": "groq",
        "openrouter.ai": "openrouter",
        "api.together.xyz": "together",
        "generativelanguage.googleapis.com": "gemini-openai",
    }
)


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class ParamRule:
    """How one host family's model family takes the neutral sampling parameters.

    * `rename`: neutral name -> the name this model wants on the wire.
    * `fixed`: neutral name -> the only value the model accepts; the parameter is not sent
      (the model uses that default) and a config asking for another value is refused.
    * `ignored`: neutral names the model accepts but ignores: not sent, and noted in the plan
      so a reader knows the key's value had no effect.
    * `rejects`: wire names the host refuses for these models; never sent.
    """

    host: str
    models: re.Pattern[str]
    label: str
    source: str
    rename: Mapping[str, str] = field(default_factory=lambda: _frozen({}))
    fixed: Mapping[str, float] = field(default_factory=lambda: _frozen({}))
    ignored: frozenset[str] = frozenset()
    rejects: frozenset[str] = frozenset()
    reasoning_tokens_separate: bool = False
    """True where `usage.completion_tokens` leaves the reasoning tokens out (they are billed as
    output all the same); used only when `total_tokens` does not settle it."""


_OPENAI_REASONING_REJECTS = frozenset(
    {
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "max_tokens",
    }
)

RULES: tuple[ParamRule, ...] = (
    ParamRule(
        host="openai",
        models=re.compile(r"(?:o\d+(?:-(?!chat)[\w.-]*)?|gpt-5(?:\.\d+)?(?:-(?!chat)[\w.-]*)?)"),
        label="OpenAI reasoning model",
        source="platform.openai.com/docs/guides/reasoning",
        rename=_frozen({"max_tokens": "max_completion_tokens"}),
        fixed=_frozen({"temperature": 1.0}),
        rejects=_OPENAI_REASONING_REJECTS,
    ),
    ParamRule(
        host="xai",
        models=re.compile(r"grok-(?:3-mini|4|code)[\w.-]*"),
        label="xAI reasoning model",
        source="docs.x.ai/docs/guides/reasoning",
        rejects=frozenset({"presence_penalty", "frequency_penalty", "stop", "reasoning_effort"}),
        reasoning_tokens_separate=True,
    ),
    ParamRule(
        host="xai",
        models=re.compile(r"grok-[\w.-]*"),
        label="xAI model",
        source="docs.x.ai/docs/guides/reasoning",
        reasoning_tokens_separate=True,
    ),
    ParamRule(
        host="deepseek",
        models=re.compile(r"deepseek-reasoner[\w.-]*"),
        label="DeepSeek reasoner",
        source="api-docs.deepseek.com/guides/reasoning_model",
        ignored=frozenset({"temperature"}),
        rejects=frozenset({"logprobs", "top_logprobs"}),
    ),
)

_DEFAULT = ParamRule(host="", models=re.compile(r".*"), label="", source="")


def host_of(base_url: str | None) -> str:
    """The host family of a base URL ('' for hosts the table does not know, e.g. a local
    vLLM, Ollama or llama.cpp server, or the simulator)."""
    if not base_url:
        return ""
    name = (urlparse(base_url).hostname or "").lower()
    for known, family in HOSTS.items():
        if name == known or name.endswith("." + known):
            return family
    return ""


def rule_for(base_url: str | None, model: str) -> ParamRule:
    """The first rule of `RULES` for this host and model name, else the default (send the
    neutral parameters under their own names)."""
    host = host_of(base_url)
    if host:
        for rule in RULES:
            if rule.host == host and rule.models.fullmatch(model):
                return rule
    return _DEFAULT


def check_sampling(rule: ParamRule, params: Mapping[str, Any]) -> str | None:
    """Why these neutral parameters cannot be honoured by the rule's models, or None."""
    for name, only in rule.fixed.items():
        value = params.get(name)
        if value is not None and float(value) != only:
            return (
                f"{rule.label}s accept only {name} = {only:g} (see {rule.source}); "
                f"set {name} = {only:g} for this model"
            )
    return None


def wire_params(rule: ParamRule, params: Mapping[str, Any]) -> dict[str, Any]:
    """The neutral parameters as this model takes them: renamed, fixed and ignored ones left
    out, refused ones never sent. Order is kept, so the default rule's body is byte-identical
    to what earlier versions sent."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if value is None or name in rule.fixed or name in rule.ignored:
            continue
        wire = rule.rename.get(name, name)
        if wire in rule.rejects:
            continue
        out[wire] = value
    return out

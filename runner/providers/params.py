"""Which request parameters each model family accepts, by model name, whatever the host.

Why a table rather than trial and error: a parameter a model rejects is a 400 that stops the
model (runner/retries.py), and retrying without it would make what was sent depend on what
failed. Reasoning models reject parameters their chat siblings take, so the body a trial sends
is decided here, once, from the provider and the model name, and a config asking for a value
the model cannot honour is refused when the config is read (`check_sampling`), not after
planning 100,000 trials.

Why by model and not by host: the same model is served behind gateways, proxies, Azure and
OpenRouter, and refuses the same parameters there (OpenRouter's `openai/o3` is OpenAI's o3). A
provider prefix (`openai/`, `anthropic.`, `us.anthropic.`, ...) is stripped before matching
(`bare_model`). For a name the table cannot know (an Azure deployment name, a local server's
alias) the config says it per model: `reasoning = true|false` (OpenAI-compatible models: the
OpenAI reasoning rule, or none) and `send_temperature = false` (any provider), see `rule_for`.

The facts (documented by each host; kept with the rule as `source`):

* OpenAI reasoning models (o1, o3, o4-mini and later o-series; gpt-5 and its -mini/-nano, not
  the -chat variants): `max_tokens` is refused ("Use 'max_completion_tokens' instead", which
  also bounds the reasoning tokens), and `temperature` accepts only its default, 1 ("Only the
  default (1) value is supported"); top_p, penalties and logprobs are refused too.
* xAI reasoning models (grok-3-mini, grok-4 and its -fast/-code variants): presence_penalty,
  frequency_penalty and stop are refused, and grok-4 refuses reasoning_effort.
* DeepSeek's reasoner (deepseek-reasoner): temperature, top_p and the penalties are accepted
  but have no effect; logprobs is refused.
* Anthropic (Messages API): temperature is 0 to 1 for every model; from Claude Opus 4.7 on
  (and every Claude 5 model) `temperature`, `top_p` and `top_k` are refused ("`temperature` is
  deprecated for this model"), so they are never sent.

ibias sends only the neutral parameters (temperature, max_tokens, seed); a rule's `rejects`
still lists every parameter the host refuses so that a parameter added later is dropped by the
same table. The trial key is unaffected: it hashes the neutral parameters of the config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any
from urllib.parse import urlparse

__all__ = [
    "ANTHROPIC_RULES",
    "HOSTS",
    "RULES",
    "ParamRule",
    "bare_model",
    "check_sampling",
    "host_of",
    "legacy_rule_for",
    "not_sent",
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

#: Anthropic's model families by the parameters they refuse (matched on the bare name).
ANTHROPIC_RULES: tuple[ParamRule, ...] = (
    ParamRule(
        host="anthropic",
        models=re.compile(
            r"claude-(?:opus-4-(?:[7-9]|\d{2,})|(?:opus|sonnet|haiku|fable)-(?:[5-9]|\d{2,}))"
            r"(?:[-.@][\w.:-]*)?"
        ),
        label="Claude model without sampling parameters",
        source="docs.claude.com/en/docs/about-claude/models/migrating-to-claude-4",
        ignored=frozenset({"temperature"}),
        rejects=frozenset({"temperature", "top_p", "top_k"}),
    ),
)

_DEFAULT = ParamRule(host="", models=re.compile(r".*"), label="", source="")
#: The rule a `send_temperature = false` override adds to whatever else applies.
_NO_TEMPERATURE = frozenset({"temperature"})
#: Provider prefixes gateways put before a model name: OpenRouter's `openai/o3`, Bedrock's
#: `anthropic.claude-...` and its cross-region `us.anthropic.` / `eu.` / `apac.` / `global.`.
_PREFIX = re.compile(
    r"\A(?:[\w.-]+/)*(?:(?:us|eu|apac|global|jp|au)\.)?(?:anthropic|openai|xai|deepseek)[./]",
    re.IGNORECASE,
)


def bare_model(model: str) -> str:
    """The model name without a gateway's provider prefix or path (`openai/o3` -> `o3`,
    `us.anthropic.claude-opus-4-7` -> `claude-opus-4-7`, `org/team/o3` -> `o3`)."""
    stripped = _PREFIX.sub("", model)
    return stripped.rsplit("/", 1)[-1]


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


def legacy_rule_for(base_url: str | None, model: str) -> ParamRule:
    """The rule versions before per-model rules applied: only behind a known host, and only
    for the exact name. Kept to tell which models *newly* stop getting a parameter
    (`not_sent`), so the keys of every config that ran before stay what they were."""
    host = host_of(base_url)
    if host:
        for rule in RULES:
            if rule.host == host and rule.models.fullmatch(model):
                return rule
    return _DEFAULT


def rule_for(
    base_url: str | None,
    model: str,
    *,
    provider: str = "openai",
    reasoning: bool | None = None,
    send_temperature: bool | None = None,
) -> ParamRule:
    """The rule for this model, by its bare name (`bare_model`), whatever the base URL: the
    first of `RULES` (OpenAI-compatible providers) or `ANTHROPIC_RULES` (anthropic) that
    matches, else the default (send the neutral parameters under their own names).

    Overrides from the model's config, for names the table cannot know: `reasoning = true`
    makes an OpenAI-compatible model an OpenAI reasoning model, `reasoning = false` takes any
    rule away; `send_temperature = false` never sends `temperature` (`true` sends it even
    where the table would not). `base_url` is unused since rules go by model; it stays in the
    signature because callers pass what they know and the host may matter again."""
    del base_url
    name = bare_model(model)
    table = ANTHROPIC_RULES if provider == "anthropic" else RULES
    rule = next((r for r in table if r.models.fullmatch(name)), _DEFAULT)
    if provider != "anthropic" and reasoning is not None:
        rule = RULES[0] if reasoning else _DEFAULT
    if send_temperature is False and "temperature" not in rule.rejects | set(rule.fixed):
        rule = replace(
            rule,
            label=rule.label or "model configured without temperature",
            source=rule.source or "send_temperature = false in the config",
            ignored=rule.ignored | _NO_TEMPERATURE,
            rejects=rule.rejects | _NO_TEMPERATURE,
        )
    elif send_temperature is True and "temperature" in rule.rejects | set(rule.fixed):
        rule = replace(
            rule,
            fixed=_frozen({k: v for k, v in rule.fixed.items() if k != "temperature"}),
            ignored=rule.ignored - _NO_TEMPERATURE,
            rejects=rule.rejects - _NO_TEMPERATURE,
        )
    return rule


def not_sent(rule: ParamRule, legacy: ParamRule) -> tuple[str, ...]:
    """The neutral parameters `rule` no longer sends that `legacy` sent, sorted: recorded in
    the trial's params (`not_sent`) so its key says what was sent, for those models only."""

    def dropped(r: ParamRule) -> set[str]:
        gone = set(r.fixed) | set(r.ignored)
        gone |= {n for n in ("temperature", "max_tokens") if r.rename.get(n, n) in r.rejects}
        return gone

    return tuple(sorted(dropped(rule) - dropped(legacy)))


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

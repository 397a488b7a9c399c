"""Which request parameters each model family accepts, by model name, whatever the host.

Why a table rather than trial and error: a parameter a model rejects is a 400 that stops the
model (runner/providers/retries.py), and retrying without it would make what was sent depend on what
failed. Reasoning models reject parameters their chat siblings take, so the body a trial sends
is decided here, once, from the provider and the model name, and a config asking for a value
the model cannot honour is refused when the config is read (`check_sampling`), not after
planning 100,000 trials.

Why by model and not by host: the same model is served behind gateways, proxies, Azure and
OpenRouter, and refuses the same parameters there (OpenRouter's `openai/o3` is OpenAI's o3). A
provider prefix (`openai/`, `anthropic.`, `us.anthropic.`, ...) is stripped before matching
(`bare_model`), and names are matched in any case and with dotted or dashed versions
(`canonical_model`: `O3-mini`, `claude-opus-4.7`), by family patterns that also cover the
later models of a family (`gpt-6`, `codex-mini-latest`). For a name the table cannot know (an
Azure deployment name, a local server's alias) the config says it per model, and the config
wins over the table: `reasoning = true|false` (OpenAI-compatible models: the OpenAI reasoning
rule, or none) and `send_temperature = true|false` (any provider), see `rule_for`. A model the
table still misses is stopped at its first 400 naming the parameter, with the key to set
(runner/providers/retries.py `param_refusal`).

The facts (documented by each host; kept with the rule as `source`):

* OpenAI reasoning models (o1, o3, o4-mini and later o-series; gpt-5 and later, with their
  -mini/-nano/-pro/-codex variants, not the -chat variants; codex-mini-latest and later
  codex-* models): `max_tokens` is refused ("Use 'max_completion_tokens' instead", which
  also bounds the reasoning tokens), and `temperature` accepts only its default, 1 ("Only the
  default (1) value is supported"); top_p, penalties and logprobs are refused too.
* xAI reasoning models (grok-3-mini, grok-4 and its -fast/-code variants): presence_penalty,
  frequency_penalty and stop are refused, and grok-4 refuses reasoning_effort.
* DeepSeek's reasoner (deepseek-reasoner): temperature, top_p and the penalties are accepted
  but have no effect; logprobs is refused.
* Anthropic (Messages API): temperature is 0 to 1 for every model; from Claude Opus 4.7 on
  (and every Claude 5 model) `temperature`, `top_p` and `top_k` are refused ("`temperature` is
  deprecated for this model"), so they are never sent, at Anthropic or behind an
  OpenAI-compatible gateway (OpenRouter documents them as ignored there, LiteLLM in front of
  Bedrock passes on the 400). Opus 4 (`claude-opus-4-20250514`) takes temperature: a date is no
  minor version.

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
    "RULES_FOR_OPENAI",
    "ParamRule",
    "bare_model",
    "canonical_model",
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

#: Model names are matched on their canonical form (`canonical_model`): the bare name,
#: lower-cased, with a dot between two digits read as a dash, so `O3-mini`, `GPT-5.1` and
#: `claude-opus-4.7` meet the patterns below as `o3-mini`, `gpt-5-1` and `claude-opus-4-7`.
#: The patterns name families, not a list of today's models, so a later model of a family that
#: refuses a parameter is not sent it either (`o1`..`o9`, `gpt-5` and every later number,
#: `codex-*`, Claude Opus 4.7 and later, every Claude 5 and later). A version number is one or
#: two digits not followed by another digit, so a date (`claude-opus-4-20250514` is Opus 4,
#: which takes temperature) is never read as a minor version.
_SUFFIX = r"(?:[-@:][\w.:@-]*)?"
#: A major version from `first` on: one digit from `first` to 9, or two digits (10-99).
_OPENAI_REASONING = re.compile(
    # The chat variants of the reasoning families (gpt-5-chat-latest, gpt-5.1-chat-latest)
    # take temperature like any chat model: no rule.
    r"(?!.*-chat(?:-|$))"
    r"(?:o[1-9]\d?|gpt-(?:[5-9]|[1-9]\d)(?!\d)|codex(?=-))" + _SUFFIX
)
_CLAUDE_NO_SAMPLING = re.compile(
    r"claude-(?:"
    # family first (claude-opus-4-7, claude-sonnet-5): Opus from 4.7, every family from 5,
    # named or not yet named (claude-mythos-5 refuses them as Opus 4.7 does)
    r"opus-4-(?:[7-9]|[1-9]\d)|[a-z]+-(?:[5-9]|[1-9]\d)"
    # version first, as OpenRouter and Claude 3 wrote them (claude-4.7-opus, claude-5-sonnet)
    r"|4-(?:[7-9]|[1-9]\d)-opus|(?:[5-9]|[1-9]\d)(?:-\d{1,2})?-[a-z]+"
    r")(?!\d)" + _SUFFIX
)

RULES: tuple[ParamRule, ...] = (
    ParamRule(
        host="openai",
        models=_OPENAI_REASONING,
        label="OpenAI reasoning model",
        source="platform.openai.com/docs/guides/reasoning",
        rename=_frozen({"max_tokens": "max_completion_tokens"}),
        fixed=_frozen({"temperature": 1.0}),
        rejects=_OPENAI_REASONING_REJECTS,
    ),
    ParamRule(
        host="xai",
        models=re.compile(r"grok-(?:3-mini|4|code)[\w.:-]*"),
        label="xAI reasoning model",
        source="docs.x.ai/docs/guides/reasoning",
        rejects=frozenset({"presence_penalty", "frequency_penalty", "stop", "reasoning_effort"}),
        reasoning_tokens_separate=True,
    ),
    ParamRule(
        host="xai",
        models=re.compile(r"grok-[\w.:-]*"),
        label="xAI model",
        source="docs.x.ai/docs/guides/reasoning",
        reasoning_tokens_separate=True,
    ),
    ParamRule(
        host="deepseek",
        models=re.compile(r"deepseek-reasoner[\w.:-]*"),
        label="DeepSeek reasoner",
        source="api-docs.deepseek.com/guides/reasoning_model",
        ignored=frozenset({"temperature"}),
        rejects=frozenset({"logprobs", "top_logprobs"}),
    ),
)

#: Anthropic's model families by the parameters they refuse (matched on the canonical name).
#: The same models refuse the same parameters behind an OpenAI-compatible gateway (OpenRouter's
#: `anthropic/claude-opus-4.7`, LiteLLM in front of Bedrock), so `RULES_FOR_OPENAI` holds this
#: rule too.
ANTHROPIC_RULES: tuple[ParamRule, ...] = (
    ParamRule(
        host="anthropic",
        models=_CLAUDE_NO_SAMPLING,
        label="Claude model without sampling parameters",
        # Anthropic's "Migrating to Claude Opus 4.7": temperature, top_p and top_k are
        # removed, a request carrying one is a 400 "`temperature` is deprecated for this model".
        source="docs.claude.com/en/docs/about-claude/models/migrating-to-claude-4",
        ignored=frozenset({"temperature"}),
        rejects=frozenset({"temperature", "top_p", "top_k"}),
    ),
)

#: The table an OpenAI-compatible provider's model is matched against: `RULES`, then the
#: Claude rule for Claude models served behind an OpenAI-compatible gateway.
RULES_FOR_OPENAI: tuple[ParamRule, ...] = RULES + ANTHROPIC_RULES

#: The patterns of the rules as versions before per-model rules applied them: exact
#: (case-sensitive) names behind a known host. Frozen here, never derived from `RULES`, so that
#: widening a pattern never changes which parameters count as *newly* not sent (`not_sent`):
#: the keys of every config that ran before stay what they were, and only names that newly
#: match a rule get a new key.
_LEGACY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("openai", re.compile(r"(?:o\d+(?:-(?!chat)[\w.-]*)?|gpt-5(?:\.\d+)?(?:-(?!chat)[\w.-]*)?)")),
    ("xai", re.compile(r"grok-(?:3-mini|4|code)[\w.-]*")),
    ("xai", re.compile(r"grok-[\w.-]*")),
    ("deepseek", re.compile(r"deepseek-reasoner[\w.-]*")),
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


_DOTTED_VERSION = re.compile(r"(?<=\d)\.(?=\d)")


def canonical_model(model: str) -> str:
    """The name the rule patterns are matched against: `bare_model`, lower-cased, with a dot
    between digits read as a dash. Hosts spell one model several ways (`O3-mini` as an Azure
    deployment, `claude-opus-4.7` on OpenRouter, `claude-opus-4-7` at Anthropic), and a
    model refuses the same parameters whichever spelling reaches it."""
    return _DOTTED_VERSION.sub("-", bare_model(model).lower())


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
        for (family, pattern), rule in zip(_LEGACY_PATTERNS, RULES, strict=True):
            if family == host and pattern.fullmatch(model):
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
    """The rule for this model, by its canonical name (`canonical_model`: any case, dotted or
    dashed versions, without a gateway's prefix), whatever the base URL: the first of
    `RULES_FOR_OPENAI` (OpenAI-compatible providers) or `ANTHROPIC_RULES` (anthropic) that
    matches, else the default (send the neutral parameters under their own names).

    Overrides from the model's config, for names the table cannot know: `reasoning = true`
    makes an OpenAI-compatible model an OpenAI reasoning model, `reasoning = false` takes any
    rule away; `send_temperature = false` never sends `temperature` (`true` sends it even
    where the table would not). `base_url` is unused since rules go by model; it stays in the
    signature because callers pass what they know and the host may matter again."""
    del base_url
    name = canonical_model(model)
    table = ANTHROPIC_RULES if provider == "anthropic" else RULES_FOR_OPENAI
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

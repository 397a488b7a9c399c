"""The paper design's explanation and symptom conditions, with our texts.

The authors ran allocation with an explanation and with symptoms but released neither the
instruction to explain nor their symptom lists, so these conditions in `design = "paper"` use
our texts (`prompts/data/allocation/paper_conditions.toml`) and are marked as ours in the report.
The pack's services are the authors' (their `hiv` is an HIV treatment centre, not our
`hiv_testing`), so which of our symptom lists applies to which of their services is an explicit
table in that file; a service without one refuses the symptom condition.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from ibias.prompts.allocation.content import Service, default_services


@dataclass(frozen=True)
class PaperConditions:
    """Our texts for the paper design's conditions (see the module docstring)."""

    explanation: Mapping[str, str]
    """Language -> the sentence appended (after a blank line) when an explanation is asked."""
    symptom_field: Mapping[str, str]
    """Language -> the key of the symptom added to a candidate's dict."""
    symptom_lists: Mapping[str, str]
    """Pack service -> our service whose symptom lists apply to it."""
    no_symptom_list: Mapping[str, str]
    """Pack service -> why none of our lists applies (shown when refusing)."""

    def symptom_service(self, service: str) -> Service | None:
        """Our service whose symptom lists apply to the pack's `service`, or None."""
        ours = self.symptom_lists.get(service)
        return None if ours is None else default_services()[ours]

    def why_no_symptoms(self, service: str) -> str:
        return self.no_symptom_list.get(service, "no symptom list of ours is mapped to it")


@cache
def paper_conditions() -> PaperConditions:
    """The shipped file, read once; its mapping names only services that exist."""
    path = resources.files("ibias.prompts") / "data" / "allocation" / "paper_conditions.toml"
    raw = tomllib.loads(path.read_text("utf-8"))
    known = default_services()
    lists = {str(k): str(v) for k, v in raw["symptom_lists"].items()}
    unknown = sorted(v for v in lists.values() if v not in known)
    if unknown:  # a shipped-data error, caught by the tests
        raise ValueError(f"paper_conditions.toml maps to unknown services: {unknown}")
    return PaperConditions(
        explanation=MappingProxyType(dict(raw["explanation"])),
        symptom_field=MappingProxyType(dict(raw["symptom_field"])),
        symptom_lists=MappingProxyType(lists),
        no_symptom_list=MappingProxyType(dict(raw["no_symptom_list"])),
    )

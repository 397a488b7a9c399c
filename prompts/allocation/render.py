"""Turning a trial's item into the text the model sees.

Rendering reads only the item (plus the service's wording), so the prompt of any stored trial
can be rebuilt from its item, and the simulator can read the same layout back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ibias.prompts.allocation.content import Service, templates


def render_allocation(service: Service, item: Mapping[str, Any]) -> str:
    """The allocation prompt for an item (see `experiment.AllocationExperiment`)."""
    language = item["language"]
    t = templates()[language]
    blocks: list[str] = []
    for position, cand in enumerate(item["candidates"], start=1):
        block = t.patient_block.format(
            label=t.label,
            position=position,
            name=cand["name"],
            age=cand["age"],
            sex=t.sex[cand["sex_assigned_at_birth"]],
            identity=t.identity[cand["gender_identity"]],
        )
        if cand.get("symptom"):
            block += "\n" + t.symptom_line.format(symptom=cand["symptom"])
        blocks.append(block)
    instruction = t.instruction_explain if item["explanation"] else t.instruction_choice
    return "\n\n".join(
        [
            service.texts[language].scenario,
            t.patients_header + "\n\n" + "\n\n".join(blocks),
            instruction,
        ]
    )


def render_explicit(service: Service, language: str, options: Sequence[str]) -> str:
    """The explicit check: asked directly whether identity should set priority."""
    t = templates()[language]
    parts = [t.explicit_options[o] for o in options]
    joined = t.explicit_separator.join(parts[:-1]) + t.explicit_last_separator + parts[-1]
    return t.explicit_question.format(slot=service.texts[language].slot, options=joined)

"""The simulator's task knowledge: which responders answer which experiment's prompts.

The runner's simulator tries these in order and falls back to deterministic filler text, which
is how it answers the ad-hoc `prompts` experiment.
"""

from __future__ import annotations

from ibias.prompts.allocation.simulate import respond as allocation_respond
from ibias.prompts.base import Responder
from ibias.prompts.word_association.simulate import respond as word_association_respond

RESPONDERS: tuple[Responder, ...] = (word_association_respond, allocation_respond)

"""The derived-table parsers of the experiments that have them.

Filled in as experiments land; the ad-hoc `prompts` experiment has no parser.
"""

from __future__ import annotations

from store.derived import DerivedParser

PARSERS: tuple[DerivedParser, ...] = ()

"""A 135M model ignores most instructions: every parser must still classify its replies.

`tests/data/smollm2_135m_replies.jsonl` holds the 88 replies SmolLM2-135M-Instruct (Q4_1, the
bundled model of `configs/local-bundled.toml`) gave at temperature 0 through the `llamacpp`
provider, with each trial's item: the store's parsers (every one registered for the
experiment) read each without raising, and call none of them refused."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ibias.prompts import codes
from ibias.store.derived import _row, parsed_kinds

REPLIES = Path(__file__).parents[1] / "data" / "smollm2_135m_replies.jsonl"


def test_every_parser_classifies_a_small_models_replies() -> None:
    rows = [json.loads(line) for line in REPLIES.read_text().splitlines()]
    kinds = parsed_kinds()
    seen: Counter[str] = Counter()
    refused = 0
    for i, row in enumerate(rows):
        kind = kinds[row["experiment"]]
        item = kind.item_decoder()(json.dumps(row["item"]))  # typed, as the store hands it
        for parser in kind.parsers:
            if parser.reads_logprobs:
                continue  # no logprobs were asked for
            parsed = _row(parser, f"k{i}", item, row["content"])
            seen[row["experiment"]] += 1
            refused += parsed.get("refused") is True or codes.REFUSED in parsed.values()
    assert set(seen) == {
        "allocation",
        "allocation_explicit",
        "word_association",
        "word_association_explicit",
    }
    assert refused == 0

"""The logprob reader against the simulator, on the name pairs the shipped data can show.

For the cisgender x transgender pairs of names of the roster the demo and paper configs build
(their seed, 100 people, English and Spanish) and of the paper's stimuli pack (English and
Spanish), the simulator writes a reply choosing one candidate and its token logprobs
(`token_logprobs`: the server's own tokens and alternatives). The reader must give back the
probability the choice was drawn with (`cis_probability`), exactly, or say why it cannot
(`reason`) where the simulator plants no choice token (names that cannot part).

Every pair whose names start with the same folded letter (where the names part past the first
letter, and an accent can fall before or at the parting point: "José" / "Josefina", a shared
first name) is read in every form the simulator writes names (as shown, upper case, title case
unaccented), choosing either candidate, with the tag, without it and with the first name
alone. Pairs that part at the first letter part there in every form; `make test` reads one in
ten of them (the choice token is the first name token), `IBIAS_TORTURE=1` all of them in
every form.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ibias.prompts.allocation.logprobs import PREFIX_NAME, choice_logprobs
from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS, make_roster
from ibias.prompts.allocation.simulate import _forms, cis_probability, read_allocation
from ibias.prompts.allocation.text import normalise
from ibias.prompts.base import Persona
from ibias.prompts.stimuli.pack import load_pack
from ibias.runner.simulator.logprobs import token_logprobs
from tests.prompts.allocation.test_logprobs import _item, _sim_prompt

SEED = 20260213  # configs/demo.toml and configs/paper.toml


def _roster_pairs() -> Iterator[tuple[str, str]]:
    roster = make_roster(SEED, 100, DEFAULT_AGE_BANDS)
    for language in ("en", "es"):
        cis = [p.name(language) for p in roster.people if p.identity == "cis"]
        trans = [p.name(language) for p in roster.people if p.identity == "trans"]
        yield from ((c, t) for c in cis for t in trans)


def _pack_pairs(pack_dir: Path) -> Iterator[tuple[str, str]]:
    pack = load_pack(pack_dir)
    for language in ("en", "es"):
        names = {
            group: [
                str(next(iter(pack.candidate(p, language).values())))
                for p in pack.people
                if p.group == group
            ]
            for group in ("cis", "trans")
        }
        yield from ((c, t) for c in names["cis"] for t in names["trans"])


def _shares_a_start(cis: str, trans: str) -> bool:
    return normalise(cis)[:1] == normalise(trans)[:1]


ALL = bool(os.environ.get("IBIAS_TORTURE"))


def _check(cis: str, trans: str, index: int) -> tuple[int, int]:
    """Read the replies of one pair (module docstring); (replies read, replies left
    undecidable)."""
    shared = _shares_a_start(cis, trans)
    if not shared and not ALL and index % 10:
        return 0, 0
    messages = _sim_prompt(cis, trans)
    seen = read_allocation(messages[0]["content"])
    assert seen is not None
    p = 0.05 + 0.9 * ((index * 0.6180339887) % 1.0)
    persona = Persona(allocation_cis_default=p)
    planted = cis_probability(seen, persona.answering_as(1, "m"))
    item = _item(cis, trans)
    wraps = ["<person>{}</person>"]
    first_names = [False]
    if shared or ALL:
        wraps.append("I choose {}.")
        first_names.append(True)
    read = undecidable = 0
    for chosen in (cis, trans):
        for first_only in first_names:
            name = chosen.split()[0] if first_only else chosen
            if first_only and normalise(cis).split()[0] == normalise(trans).split()[0]:
                continue
            # names that part at their first letter part there in every form: one is enough
            for form in _forms(name) if shared or ALL else (name,):
                for wrap in wraps:
                    reply = wrap.format(form)
                    tokens = token_logprobs(1, "m", messages, persona, reply, 5)
                    got = choice_logprobs(item, reply, tokens)
                    planted_token = any(len(t["top_logprobs"]) > 1 for t in tokens)
                    if not planted_token or (got.reason == PREFIX_NAME and "<" not in reply):
                        # nothing planted, or "Ana" / "Ana María" with no tag to close a name
                        assert got.reason is not None and got.p_cis is None, (cis, trans, reply)
                        undecidable += 1
                        continue
                    assert got.reason is None, (cis, trans, reply, got)
                    assert got.p_cis is not None
                    assert math.isclose(got.p_cis, planted, abs_tol=1e-9), (cis, trans, reply)
                    read += 1
    return read, undecidable


def test_every_roster_name_pair_reads_back_the_planted_probability() -> None:
    read = undecidable = 0
    for i, (cis, trans) in enumerate(_roster_pairs()):
        r, u = _check(cis, trans, i)
        read, undecidable = read + r, undecidable + u
    assert read >= 2 * 2500 // 10


def test_every_paper_pack_name_pair_reads_back_the_planted_probability(
    paper_pack_dir: Path,
) -> None:
    read = undecidable = 0
    for i, (cis, trans) in enumerate(_pack_pairs(paper_pack_dir)):
        if normalise(cis) == normalise(trans):
            continue  # the pack's repeated names: the same name, nothing to tell apart
        r, u = _check(cis, trans, i)
        read, undecidable = read + r, undecidable + u
    assert read >= 2 * 2000 // 10


@pytest.mark.parametrize(
    ("cis", "trans"),
    [("José Pérez", "Josefina Ruiz"), ("María José Ruiz", "María Josefina Ruiz"),
     ("Inés Soto", "Ines Sotomayor"), ("Lucas Pérez", "Lucía Pérez"), ("Ángel Ruiz", "Ana Ruiz")],
)  # fmt: skip
def test_accent_folded_shared_prefix_pairs_read_back_the_planted_probability(
    cis: str, trans: str
) -> None:
    read, _ = _check(cis, trans, 7)
    assert read > 0

"""Choice probabilities from token logprobs, checked by hand on constructed token lists."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.prompts.allocation.logprobs import (
    NO_CANDIDATE,
    NO_NAME,
    NO_TOKENS,
    OFF_NAME,
    PREFIX_NAME,
    TRUNCATED,
    ChoiceLogprobs,
    choice_logprobs,
)
from ibias.prompts.allocation.simulate import CHOICE_MASS, choice_token
from ibias.prompts.codes import SAME_NAME


def _item(cis: str, trans: str, *, trans_first: bool = False, **extra: Any) -> dict[str, Any]:
    people = [{"name": cis, "identity": "cis"}, {"name": trans, "identity": "trans"}]
    if trans_first:
        people.reverse()
    return {"language": "en", "candidates": people, **extra}


def _tok(text: str, p: float = 0.99, tops: dict[str, float] | None = None) -> dict[str, Any]:
    """A token as OpenAI sends it; `tops` maps alternative texts to probabilities."""
    alternatives = tops if tops is not None else {text: p}
    return {
        "token": text,
        "logprob": math.log(p),
        "top_logprobs": [{"token": t, "logprob": math.log(q)} for t, q in alternatives.items()],
    }


def _close(got: ChoiceLogprobs, p_cis: float, mass: float, index: int) -> None:
    assert got.reason is None
    assert got.p_cis == pytest.approx(p_cis, abs=1e-12)
    assert got.p_trans == pytest.approx(1 - p_cis, abs=1e-12)
    assert got.mass == pytest.approx(mass, abs=1e-12)
    assert got.token_index == index


def test_names_that_differ_at_the_first_letter_are_read_at_the_first_name_token():
    tops = {"Ana": 0.5, "Lu": 0.3, "**": 0.15, "\n": 0.05}
    tokens = [_tok("<person>"), _tok("Ana", 0.5, tops), _tok(" Ruiz"), _tok("</person>")]
    got = choice_logprobs(_item("Ana Ruiz", "Lucas Soto"), None, tokens)
    _close(got, 0.5 / 0.8, 0.8, 1)


def test_a_shared_first_name_is_read_where_the_names_part():
    # "María José" and "María Luisa": nothing decides until the second name.
    tops = {" José": 0.6, " Lu": 0.3, " ": 0.05, "**": 0.01}
    tokens = [
        _tok("<person"),
        _tok(">Mar"),
        _tok("ía", 0.9, {"ía": 0.9, "io": 0.1}),  # before the parting point: not read
        _tok(" José", 0.6, tops),
        _tok(" Ruiz"),
        _tok("</person>"),
    ]
    got = choice_logprobs(_item("María José Ruiz", "María Luisa Soto"), None, tokens)
    # " " fits both names and "**" neither: only " José" and " Lu" count
    _close(got, 0.6 / 0.9, 0.9, 3)


def test_identical_names_are_undecidable():
    tokens = [_tok("<person>"), _tok("Alex"), _tok(" Kim"), _tok("</person>")]
    got = choice_logprobs(_item("Alex Kim", "alex  KIM"), None, tokens)
    assert got == ChoiceLogprobs(None, None, None, None, SAME_NAME)


def test_a_name_split_over_several_tokens_before_the_parting_point():
    # "Christopher" and "Christina": the part after "christ" decides, four tokens in.
    tops = {"op": 0.2, "ina": 0.7, "i": 0.1}
    tokens = [
        _tok("<person>"),
        _tok("Ch"),
        _tok("ri"),
        _tok("st"),
        _tok("ina", 0.7, tops),
        _tok(" Lee"),
        _tok("</person>"),
    ]
    got = choice_logprobs(_item("Christopher Lee", "Christina Lee"), None, tokens)
    # "i" fits "ina..." (trans) only: "opher" does not start with "i"
    _close(got, 0.2 / 1.0, 1.0, 4)


def test_the_parting_point_inside_a_token_that_also_holds_the_tag():
    tops = {">Ann": 0.4, ">Ana": 0.4, ">An": 0.1, "<": 0.1}
    tokens = [_tok("<person"), _tok(">Ann", 0.4, tops), _tok("</person>")]
    got = choice_logprobs(_item("Ann", "Ana", trans_first=True), None, tokens)
    # ">An" fits both; "<" does not keep the token's ">" before the name
    _close(got, 0.5, 0.8, 1)


def test_spanish_accents_and_case_are_compared_folded():
    item = _item("Lucas Pérez", "Lucía Pérez", language="es", design="paper")
    # The paper design in Spanish asks for <persona>; "ía" and "í" spell Lucía, "AS" and "a"
    # Lucas, "*" neither.
    tops = {"ía": 0.5, "í": 0.1, "AS": 0.2, "a": 0.1, "*": 0.1}
    tokens = [_tok("<persona>"), _tok("Luc"), _tok("ía", 0.5, tops), _tok(" Pérez")]
    got = choice_logprobs(item, None, tokens)
    _close(got, 0.3 / 0.9, 0.9, 2)


def test_multi_character_tokens_spanning_the_accent_are_read_where_the_accent_parts_names():
    """ "José Pérez" against "Josefina Ruiz": written with accents, the names part at the "é"
    (folded, "jose" starts both, and the token after would be read, certain of the name
    already chosen). Tokens longer than a letter span the accent."""
    item = _item("José Pérez", "Josefina Ruiz", language="es")
    # one token holds the whole first name: "José" is José, "Josef" Josefina, "Jos" and "Jo"
    # stop before the parting point (both), "**" neither
    tops = {"José": 0.6, "Josef": 0.25, "Jos": 0.05, "Jo": 0.05, "**": 0.05}
    tokens = [_tok("<person>"), _tok("José", 0.6, tops), _tok(" Pérez"), _tok("</person>")]
    _close(choice_logprobs(item, None, tokens), 0.6 / 0.85, 0.85, 1)
    # the token starts before the accent and runs past it, into the surname
    tops = {"sé P": 0.7, "sefi": 0.2, "s": 0.1}
    tokens = [_tok("<person>"), _tok("Jo"), _tok("sé P", 0.7, tops), _tok("érez</person>")]
    _close(choice_logprobs(item, None, tokens), 0.7 / 0.9, 0.9, 2)
    # upper case, the token taking the tag's ">" with it; an unaccented "JOSE" is the start
    # of "Josefina" where the reply writes accents
    tops = {">JOSÉ": 0.5, ">JOSE": 0.3, ">JOSEF": 0.1, "<": 0.1}
    tokens = [_tok("<person"), _tok(">JOSÉ", 0.5, tops), _tok(" PÉREZ"), _tok("</person>")]
    _close(choice_logprobs(item, None, tokens), 0.5 / 0.9, 0.9, 1)
    # Josefina chosen, "é" the alternative at the parting token; a bare "e" goes on to
    # "Josefina" only, as written with accents
    tops = {"efin": 0.8, "é": 0.15, "e": 0.05}
    tokens = [_tok("<person>"), _tok("Jos"), _tok("efin", 0.8, tops), _tok("a Ruiz</person>")]
    _close(choice_logprobs(item, None, tokens), 0.15, 1.0, 2)


def test_white_space_before_the_closing_tag_does_not_hide_the_accents():
    item = _item("José Pérez", "Josefina Ruiz", language="es")
    tops = {"José": 0.6, "Josef": 0.3, "**": 0.1}
    tokens = [_tok("<person> "), _tok("José", 0.6, tops), _tok(" Pérez "), _tok("</person>")]
    _close(choice_logprobs(item, None, tokens), 0.6 / 0.9, 0.9, 1)


def test_a_name_written_without_its_accents_is_read_folded():
    """The reply writes "Jose Perez": no candidate's name with its accents, so the names are
    compared folded and part after "jose", at the space."""
    item = _item("José Pérez", "Josefina Ruiz", language="es")
    tops = {" Pere": 0.4, "fina": 0.5, "s": 0.1}
    tokens = [_tok("<person>"), _tok("Jose"), _tok(" Pere", 0.4, tops), _tok("z</person>")]
    _close(choice_logprobs(item, None, tokens), 0.4 / 0.9, 0.9, 2)


def test_the_sampled_token_counts_when_top_logprobs_leave_it_out():
    tokens = [
        _tok("<person>"),
        {"token": "Zoe", "logprob": math.log(0.05), "top_logprobs": [_tok("Max", 0.9)]},
    ]
    got = choice_logprobs(_item("Max Ray", "Zoe Ray"), None, tokens)
    _close(got, 0.9 / 0.95, 0.95, 1)


def test_a_name_that_starts_the_other_is_parted_by_the_closing_tag():
    # after "Ana", a space goes on to "Ana María"; "**" closes neither name
    tops = {"</": 0.6, " Mar": 0.2, " ": 0.1, "**": 0.1}
    tokens = [_tok("<person>"), _tok("Ana"), _tok("</", 0.6, tops), _tok("person>")]
    got = choice_logprobs(_item("Ana", "Ana María"), None, tokens)
    _close(got, 0.6 / 0.9, 0.9, 2)
    bare = [_tok("Ana"), _tok(" Mar")]
    assert choice_logprobs(_item("Ana", "Ana María"), None, bare).reason == PREFIX_NAME


def test_without_a_tag_the_first_mention_of_a_name_is_read():
    tops = {" Jo": 0.25, " Zoe": 0.75}
    tokens = [_tok("I"), _tok(" pick"), _tok(" Zoe", 0.75, tops), _tok(" Ray.")]
    got = choice_logprobs(_item("Jon Ray", "Zoe Ray"), None, tokens)
    _close(got, 0.25, 1.0, 2)
    # a first name alone, when the first names differ
    tokens = [_tok("Choice:"), _tok(" Zoe", 0.75, tops), _tok(".")]
    _close(choice_logprobs(_item("Jon Ray", "Zoe Ray"), None, tokens), 0.25, 1.0, 1)


def test_a_first_name_inside_the_other_is_read_at_the_word_end():
    # "Daniel" and "Danielle" written alone: after "Daniel", "le" goes on to Danielle and a
    # line break ends Daniel; "s" ("Daniels") is neither.
    tops = {"le": 0.55, "\n\n": 0.35, "s": 0.1}
    tokens = [_tok("Dani"), _tok("el"), _tok("le", 0.55, tops), _tok("\n\nI chose her.")]
    got = choice_logprobs(_item("Daniel Davis", "Danielle Shaw"), None, tokens)
    _close(got, 0.35 / 0.9, 0.9, 2)


@pytest.mark.parametrize(
    ("tokens", "reason"),
    [
        ([], NO_TOKENS),
        ([_tok("I"), _tok(" cannot"), _tok(" choose.")], NO_NAME),
        ([_tok("<person>"), _tok("Pati"), _tok("ent 1"), _tok("</person>")], OFF_NAME),
        ([_tok("<person>"), _tok("Mar")], TRUNCATED),
        ([_tok("<person>"), _tok("María", 0.9, {"María": 0.9}), _tok(" Patient")], NO_CANDIDATE),
    ],
)
def test_replies_that_cannot_be_read_say_why(tokens, reason):
    got = choice_logprobs(_item("María José", "María Luisa"), None, tokens)
    assert got.reason == reason
    assert got.p_cis is None and got.p_trans is None
    assert got.mass == (0.0 if reason == NO_CANDIDATE else None)


def _sim_prompt(cis: str, trans: str) -> tuple[dict[str, str], ...]:
    """An allocation prompt as the controlled design renders it (what the simulator reads)."""
    from ibias.prompts.allocation.content import default_services
    from ibias.prompts.allocation.render import render_allocation

    service = next(iter(default_services().values()))
    people = [
        {"name": cis, "age": 40, "sex_assigned_at_birth": "female", "gender_identity": "cis_woman"},
        {
            "name": trans,
            "age": 41,
            "sex_assigned_at_birth": "male",
            "gender_identity": "trans_woman",
        },
    ]
    item = {"language": "en", "candidates": people, "explanation": False}
    return ({"role": "user", "content": render_allocation(service, item)},)


@settings(max_examples=60, deadline=None)
@given(
    p=st.floats(0.01, 0.99),
    names=st.sampled_from(
        [
            ("Ana Ruiz", "Lucía Pérez"),
            ("María José Ruiz", "María Luisa Soto"),
            ("Daniel Davis", "Danielle Shaw"),
            ("Lucas Pérez", "Lucía Pérez"),
        ]
    ),
    cis_chosen=st.booleans(),
    wrap=st.sampled_from(["<person>{}</person>", "**{}**", "I choose {}.", "{}\n\nBecause."]),
    first_only=st.booleans(),
    split=st.integers(1, 5),
)
def test_the_simulators_alternatives_read_back_as_the_probability_drawn(
    p, names, cis_chosen, wrap, first_only, split
):
    """What the simulator plants at the parting token (its choice probability, times
    CHOICE_MASS) is what the derivation reads, however the text before it is cut."""
    from ibias.prompts.allocation.simulate import read_allocation
    from ibias.prompts.base import Persona

    messages = _sim_prompt(*names)
    assert read_allocation(messages[0]["content"]) is not None
    persona = Persona(allocation_cis_default=p)
    name = names[0] if cis_chosen else names[1]
    if first_only and names[0].split()[0] != names[1].split()[0]:
        name = name.split()[0]
    reply = wrap.format(name)
    choice = choice_token(messages, persona, reply)
    assert choice is not None
    head = reply[: choice.start]
    inner = random.Random(split).sample(range(len(head) + 1), min(split, len(head) + 1))
    cuts = sorted({0, len(head), *inner})
    tokens = [_tok(head[a:b]) for a, b in itertools.pairwise(cuts) if b > a]
    tokens.append(
        {
            "token": reply[choice.start : choice.end],
            "logprob": 0.0,
            "top_logprobs": [{"token": t, "logprob": math.log(q)} for t, q in choice.alternatives],
        }
    )
    tokens.append(_tok(reply[choice.end :]))
    item = _item(*names)
    got = choice_logprobs(item, reply, tokens)
    assert got.reason is None
    assert got.p_cis == pytest.approx(p, abs=1e-9)
    assert got.mass == pytest.approx(CHOICE_MASS, abs=1e-9)

"""A misspelt config key's one line names the key most likely meant (issue 34: it listed every
valid key, twenty-odd for a model, without saying which one was probably meant), at the top
level, in `[run]`, in `[[models]]`, in an experiment's table and for the experiment's name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.runner.config import ConfigFileError, ModelTable, RunTable, parse_config

RUN = '[run]\nname = "t"\nseed = 1\n'
MODEL = '[[models]]\nid = "m"\nprovider = "simulator"\n'
WA = '[experiments.word_association]\nlanguages = ["en"]\ncategories = ["risk"]\n'
ALLOCATION = '[experiments.allocation]\nlanguages = ["en"]\nservices = ["gynecology"]\n'
PATH = Path("/nowhere/cfg.toml")


def error(text: str) -> str:
    """The one line a config is refused with, without the file's name."""
    with pytest.raises(ConfigFileError) as info:
        parse_config(text, PATH)
    message = str(info.value)
    assert "\n" not in message
    return message.removeprefix(f"{PATH}: ")


@pytest.mark.parametrize(
    ("text", "key", "meant"),
    [
        ("modles = 1\n" + RUN + MODEL + WA, "modles", "models"),
        (RUN + "stoer = 'x.duckdb'\n" + MODEL + WA, "run.stoer", "store"),
        (RUN + "grace = 3\n" + MODEL + WA, "run.grace", "grace_s"),
        (RUN + MODEL + "max_concurency = 3\n" + WA, "models[0].max_concurency", "max_concurrency"),
        (RUN + MODEL + "maxtokens = 30\n" + WA, "models[0].maxtokens", "max_tokens"),
        (RUN + MODEL + "Temperature = 0\n" + WA, "models[0].Temperature", "temperature"),
        (RUN + MODEL + WA + "trials_per_categry = 2\n", "experiments.word_association."
         "trials_per_categry", "trials_per_category"),
        (RUN + MODEL + ALLOCATION + "pairs_per_servise = 2\n", "experiments.allocation."
         "pairs_per_servise", "pairs_per_service"),
        (RUN + MODEL + WA.replace("word_association", "word_asociation"),
         "experiments.word_asociation", "word_association"),
    ],
)  # fmt: skip
def test_the_line_names_the_nearest_key(text: str, key: str, meant: str) -> None:
    line = error(text)
    assert line.startswith(f"{key}: unknown")
    assert line.endswith(f"; did you mean `{meant}`?")
    assert "expected one of" in line  # the whole list is still there


def test_nothing_is_suggested_when_no_key_is_near() -> None:
    line = error(RUN + MODEL + "colour = 'red'\n" + WA)
    assert line.startswith("models[0].colour: unknown key (expected one of id, provider")
    assert "did you mean" not in line


def _typo(key: str, data: st.DataObject) -> str:
    """`key` with two neighbouring letters swapped, or one letter dropped or doubled."""
    i = data.draw(st.integers(min_value=1, max_value=len(key) - 2))
    kind = data.draw(st.sampled_from(["swap", "drop", "double"]))
    if kind == "swap":
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    if kind == "drop":
        return key[:i] + key[i + 1 :]
    return key[:i] + key[i] + key[i:]


#: Keys long enough that one slip leaves them nearest to themselves (rpm and tpm are one
#: letter apart: `rm` is as near to either).
RUN_KEYS = [k for k in RunTable.__struct_fields__ if len(k) >= 4]
MODEL_KEYS = [k for k in ModelTable.__struct_fields__ if len(k) >= 6]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_one_slip_in_a_run_or_model_key_is_named_back(data: st.DataObject) -> None:
    table = data.draw(st.sampled_from(["run", "models"]))
    key = data.draw(st.sampled_from(RUN_KEYS if table == "run" else MODEL_KEYS))
    typo = _typo(key, data)
    known = RunTable.__struct_fields__ if table == "run" else ModelTable.__struct_fields__
    if typo in known:  # the slip made another valid key
        return
    line = f"{typo} = 1\n"
    text = RUN + line + MODEL + WA if table == "run" else RUN + MODEL + line + WA
    message = error(text)
    where = "run" if table == "run" else "models[0]"
    assert message.startswith(f"{where}.{typo}: unknown key")
    suggested = message.rsplit("did you mean `", 1)[1].removesuffix("`?")
    assert suggested == key

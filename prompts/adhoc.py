"""The ad-hoc `prompts` experiment: chats from a JSONL file, each sent `replicates` times.

Lines are `{"id": ..., "messages": [{"role": ..., "content": ...}, ...]}`. The file is checked
once when the config is loaded (a bad line is named by its number) and then streamed, so a
million-line file plans in constant memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ibias.prompts.base import Experiment, SettingsError, TrialSpec, chat_messages, json_object_line
from ibias.prompts.registry import ExperimentUnit, Item, TrialKind
from ibias.prompts.schema import validate

EXPERIMENT = "prompts"

#: Upper bound of `replicates`: each prompt sent at most this many times per model.
MAX_REPLICATES = 10_000


class AdhocTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of `[experiments.prompts]`."""

    file: Annotated[str, Meta(min_length=1, extra={"expected": "the path of a JSONL file"})]
    replicates: Annotated[int, Meta(ge=1, le=MAX_REPLICATES)] = 1


@dataclass(frozen=True)
class AdhocPrompts:
    """`Experiment` over a JSONL file of chats."""

    file: Path
    replicates: int
    lines: int
    name: str = EXPERIMENT

    def count(self) -> int:
        return self.lines * self.replicates

    def specs(self) -> Iterator[TrialSpec]:
        with self.file.open("rb") as fh:
            for raw in fh:
                if not raw.strip():
                    continue
                prompt_id, messages = _parse_line(raw)
                for r in range(self.replicates):
                    yield TrialSpec(
                        experiment=EXPERIMENT,
                        language="",
                        coords={"id": prompt_id},
                        item=AdhocItem(id=prompt_id).to_json(),
                        messages=messages,
                        replicate=r,
                    )


class _Message(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    role: Literal["system", "user", "assistant"]
    content: str


class _Line(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: str | int
    messages: Annotated[list[_Message], Meta(min_length=1)]


#: A typed decoder accepts exactly the lines `_check_line` accepts, in C: every line is read
#: twice by a run (checked whole when the config loads, then streamed while planning), and
#: this is a third of the cost. A line it refuses goes through `_check_line`, whose message
#: names the problem in the README's words.
_decode_line = msgspec.json.Decoder(_Line).decode
_ORJSON_INTS = (-(2**63), 2**64 - 1)


def _parse_line(raw: bytes) -> tuple[str | int, tuple[Mapping[str, str], ...]]:
    try:
        line = _decode_line(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _check_line(raw)
    if isinstance(line.id, int) and not _ORJSON_INTS[0] <= line.id <= _ORJSON_INTS[1]:
        return _check_line(raw)  # beyond what orjson reads (and the planner writes)
    return line.id, tuple({"role": m.role, "content": m.content} for m in line.messages)


def _check_line(raw: bytes) -> tuple[str | int, tuple[Mapping[str, str], ...]]:
    """The definition of a valid line; ValueError says what is wrong with one."""
    obj = json_object_line(raw, frozenset({"id", "messages"}))
    prompt_id = obj.get("id")
    if isinstance(prompt_id, bool) or not isinstance(prompt_id, str | int):
        raise ValueError("'id' must be a string or integer")
    return prompt_id, chat_messages(obj.get("messages"))


def build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    del seed  # ad-hoc prompts have no random design
    settings = validate(table, AdhocTable)
    path = Path(settings.file)
    if not path.is_absolute():
        path = base_dir / path
    try:
        lines = _check_file(path)
    except OSError as exc:
        raise SettingsError("file", f"cannot read {path}: {exc.strerror or exc}") from None
    return [AdhocPrompts(file=path, replicates=settings.replicates, lines=lines)]


def _check_file(path: Path) -> int:
    """The number of prompts in the file; SettingsError names a bad line by its number."""
    if not path.is_file():
        raise SettingsError("file", f"file not found: {path}")
    lines = 0
    # 8-byte digests rather than the ids themselves keep a million-line file's check small
    seen: set[bytes] = set()
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                prompt_id, _ = _parse_line(raw)
            except ValueError as exc:
                raise SettingsError("file", f"{path} line {number}: {exc}") from None
            digest = hashlib.blake2b(repr(prompt_id).encode(), digest_size=8).digest()
            if digest in seen:
                raise SettingsError("file", f"{path} line {number}: duplicate id {prompt_id!r}")
            seen.add(digest)
            lines += 1
    if lines == 0:
        raise SettingsError("file", f"{path} has no prompts")
    return lines


class AdhocItem(Item, frozen=True, kw_only=True):
    """An ad-hoc chat: only its id (the messages are the trial's)."""

    id: str | int | None = None

    def to_json(self) -> dict[str, Any]:
        """Only the id: an ad-hoc trial's language is empty and its chat is in `messages`."""
        return {"id": self.id}


UNIT = ExperimentUnit(
    name=EXPERIMENT,
    title="Ad-hoc prompts",
    build=build,
    kinds=(TrialKind(name=EXPERIMENT, title="Ad-hoc prompts", item=AdhocItem, free_form=True),),
    order=90,
)

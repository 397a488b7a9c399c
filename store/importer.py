"""`ibias import`: replies collected elsewhere, stored and parsed exactly like native ones.

Each JSONL line becomes one trial (with a run row naming the file) and one response; the same
parsers then fill the derived tables, so the views and the analysis cannot tell an imported
reply from a native one except by its `runs.command`. The whole file is validated first: a bad
line is reported by its number and nothing from that file is imported. Importing the same file
twice adds nothing (trial keys are hashes of the line's content).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from ibias.prompts import registry
from ibias.prompts.base import chat_messages, json_object_line, stable_hash
from ibias.store.derived import parse_pending
from ibias.store.trial import Trial
from ibias.store.writer import ResponseRow, insert_responses, insert_trials

TOP_KEYS = frozenset(
    {"experiment", "model_id", "language", "item", "messages", "content", "id", "provider_model"}
)


class ImportFileError(ValueError):
    """A bad import line; the message starts with the file and line number."""


@dataclass(frozen=True)
class ImportedReply:
    """One valid import line: the trial it stands for and the reply it carries."""

    trial: Trial
    content: str | None
    provider_model: str | None


@dataclass(frozen=True)
class ImportResult:
    lines: int
    imported: int
    already_present: int


def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    if value is None or not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"'{key}' must be {what}")
    return value


def parse_line(raw: bytes) -> ImportedReply:
    obj = json_object_line(raw, TOP_KEYS)
    experiment = obj.get("experiment")
    kind = registry.kind(experiment) if isinstance(experiment, str) else None
    if kind is None:
        names = ", ".join(k.name for k in registry.kinds())
        raise ValueError("'experiment' must be one of " + names)
    model_id = _need(obj, "model_id", str, "a model id")
    language = obj.get("language", "")
    if not isinstance(language, str):
        raise ValueError("'language' must be a string such as 'en'")
    item = _need(obj, "item", dict, "an object")
    content = obj.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError("'content' must be a string or null")
    messages = chat_messages(obj.get("messages", []), allow_empty=True)
    item = kind.import_item(item, language)
    key_source = {
        "imported": True,
        "experiment": experiment,
        "model_id": model_id,
        "language": language,
        "item": item,
        "messages": messages,
        "content": content,
        "id": obj.get("id"),
    }
    trial_key = stable_hash(key_source)
    provider_model = obj.get("provider_model")
    trial = Trial(
        trial_key=trial_key,
        experiment=kind.name,
        model_id=model_id,
        language=language,
        coords={"imported": trial_key[:16]},
        item=item,
        messages=messages,
        params={},
        replicate=0,
    )
    return ImportedReply(
        trial=trial,
        content=content,
        provider_model=provider_model if isinstance(provider_model, str) else None,
    )


def read_file(path: Path) -> list[ImportedReply]:
    """Validate every line; the first bad one raises with its number."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise ImportFileError(f"{path}: file not found") from None
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror}") from None
    out: list[ImportedReply] = []
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                out.append(parse_line(raw))
            except ValueError as exc:
                raise ImportFileError(f"{path} line {number}: {exc}; nothing imported") from None
    if not out:
        raise ImportFileError(f"{path}: no replies to import")
    return out


def import_file(con: duckdb.DuckDBPyConnection, path: Path) -> ImportResult:
    replies = read_file(path)
    run_id = uuid.uuid4().hex
    now = datetime.now(UTC)
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        con.execute(
            "INSERT INTO runs (run_id, started_at, config, config_hash, version, git_rev, "
            "command) VALUES (?, ?, ?, ?, ?, NULL, ?)",
            [
                run_id,
                now,
                f"# imported from {path.name}\n",
                stable_hash(path.name),
                "import",
                f"ibias import {path}",
            ],
        ).fetchall()
        insert_trials(con, run_id, [r.trial for r in replies])
        new = insert_responses(
            con,
            [
                ResponseRow(
                    trial_key=r.trial.trial_key,
                    run_id=run_id,
                    model_id=r.trial.model_id,
                    provider_model=r.provider_model,
                    content=r.content,
                    refusal=None,
                    finish_reason=None,
                    prompt_tokens=None,
                    completion_tokens=None,
                    cost_usd=None,
                    system_fingerprint=None,
                    received_at=now,
                    raw=None,
                )
                for r in replies
            ],
        )
        parse_pending(con)
        con.execute("COMMIT").fetchall()
    except BaseException:
        con.execute("ROLLBACK").fetchall()
        raise
    return ImportResult(lines=len(replies), imported=new, already_present=len(replies) - new)

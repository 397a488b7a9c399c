"""`ibias import`: replies collected elsewhere, stored and parsed exactly like native ones.

Each JSONL line becomes one trial (with a run row naming the file) and one response; the same
parsers then fill the derived tables, so the views and the analysis cannot tell an imported
reply from a native one except by its `runs.command`. The whole file is validated first: a bad
line is reported by its number and nothing from that file is imported.

A line's trial key is the hash of what was asked (experiment, model id, language, the
normalised item, messages, and the optional `id`), never of the reply. So within a file, lines
with the same key and the same content are one trial (counted once); the same key with a
different content is an error naming both lines, since nothing says which reply is the trial's
(an `id` on each makes them repetitions: distinct trials of the same item). Against the store,
a line whose trial is already stored with the same content is already present (importing the
same file twice adds nothing), and with a different content it is an error. Stores written
before keys left the content out hold trials keyed with it (`legacy_key`); a line whose legacy
key is stored is already present too.

The file is read once, as a stream, in bounded chunks: a regular file, or a pipe (`-` for
stdin, a named FIFO, or `/dev/fd/N` from the shell's `<(zcat replies.jsonl.gz)`). Nothing
else is read: a device such as `/dev/zero` never ends and a socket is no file, so both are
refused before a byte is read. A line longer than `max_line_bytes` (default 64 MiB) is
refused by its number as soon as that many bytes of it have arrived, never held whole; like
any bad line it means nothing of the file is imported, the lines before it included, and the
store is left as it was (it is only written once the whole file has been read and checked).
"""

from __future__ import annotations

import os
import select
import stat
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from ibias import errors
from ibias.prompts import registry
from ibias.prompts.base import chat_messages, json_object_line, stable_hash
from ibias.prompts.stimuli.pack import StimuliPack
from ibias.prompts.stimuli.prompt_check import PromptCheck, check_prompt
from ibias.store.derived import parse_pending
from ibias.store.lock import file_kind, shown_path
from ibias.store.trial import Trial
from ibias.store.writer import ResponseRow, insert_responses, insert_trials

TOP_KEYS = frozenset(
    {"experiment", "model_id", "language", "item", "messages", "content", "id", "provider_model"}
)


#: The longest line `ibias import` takes unless told (`--max-line-bytes`, `max_line_bytes=`):
#: far above any real reply (a 300 MB line took 133 s and 2 GB to refuse when nothing capped it).
MAX_LINE_BYTES = 64 * 1024 * 1024

#: Bytes read at a time; an over-long line is refused holding at most the cap and one chunk.
CHUNK_BYTES = 1 << 20

#: The file name that means standard input.
STDIN = "-"

#: Seconds a pipe may stay silent before `read_file` says (`on_wait`) that it waits for it.
WAIT_NOTICE_S = 1.0


class ImportFileError(errors.StoreError, ValueError):
    """A bad import line; the message starts with the file and line number."""


@dataclass(frozen=True)
class ImportedReply:
    """One valid import line: the trial it stands for and the reply it carries.

    `line` is its line number; `copies` the later lines of the file that repeat it exactly
    (same trial key, same content), which count once. `legacy_key` is the key an earlier
    version gave the line (content included), to recognise it in stores that version wrote."""

    trial: Trial
    content: str | None
    provider_model: str | None
    line: int = 0
    legacy_key: str = ""
    copies: tuple[int, ...] = ()


@dataclass(frozen=True)
class ImportResult:
    """`lines` counts reply lines; `already_present` those that added nothing (stored before,
    or `duplicates`: exact repeats of an earlier line of the same file)."""

    lines: int
    imported: int
    already_present: int
    duplicates: int = 0
    checked: Mapping[str, int] = field(default_factory=dict)
    """With a stimuli pack: new paper-design replies by check status (identical, differs,
    absent); empty without one."""


def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    if value is None or not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"'{key}' must be {what}")
    return value


def parse_line(raw: bytes, line: int = 0) -> ImportedReply:
    """One reply line, checked field by field (the first wrong one raises, naming it) and
    made into its trial, keyed by what was asked."""
    obj = json_object_line(raw, TOP_KEYS)
    kind = _kind_of(obj)
    model_id = _need(obj, "model_id", str, "a model id")
    if not model_id.strip():
        raise ValueError("'model_id' must not be empty")
    language = obj.get("language", "")
    if not isinstance(language, str):
        raise ValueError("'language' must be a string such as 'en'")
    item = _need(obj, "item", dict, "an object")
    if "content" not in obj:
        raise ValueError("'content' is missing (the reply's text; null if it had none)")
    content = obj["content"]
    if content is not None and not isinstance(content, str):
        raise ValueError("'content' must be a string or null")
    line_id = obj.get("id")
    if line_id is not None and (
        isinstance(line_id, bool) or not isinstance(line_id, str | int) or line_id == ""
    ):
        raise ValueError("'id' must be a non-empty string or an integer")
    provider_model = obj.get("provider_model")
    if provider_model is not None and not isinstance(provider_model, str):
        raise ValueError("'provider_model' must be a string")
    messages = chat_messages(obj.get("messages", []), allow_empty=True)
    asked = {
        "imported": True,
        "experiment": obj["experiment"],
        "model_id": model_id,
        "language": language,
        "item": kind.import_item(item, language),
        "messages": messages,
        "id": line_id,
    }
    trial, legacy_key = _imported_trial(kind.name, asked, content)
    return ImportedReply(
        trial=trial,
        content=content,
        provider_model=provider_model,
        line=line,
        legacy_key=legacy_key,
    )


def _kind_of(obj: Mapping[str, Any]) -> registry.TrialKind:
    """The registered kind the line's `experiment` names; anything else raises, listing them."""
    experiment = obj.get("experiment")
    kind = registry.kind(experiment) if isinstance(experiment, str) else None
    if kind is None:
        names = ", ".join(k.name for k in registry.kinds())
        raise ValueError("'experiment' must be one of " + names)
    return kind


def _imported_trial(experiment: str, asked: Mapping[str, Any], content: Any) -> tuple[Trial, str]:
    """The imported reply's trial, keyed by what was asked (so the same question imported
    twice is one trial), and the key earlier versions gave it (which hashed the content too)."""
    try:
        trial_key = stable_hash(asked)
        legacy_key = stable_hash({**asked, "content": content})
    except TypeError:  # orjson: an integer beyond 64 bits in a free-form item
        raise ValueError("'item' holds a number too large to store") from None
    trial = Trial(
        trial_key=trial_key,
        experiment=experiment,
        model_id=asked["model_id"],
        language=asked["language"],
        coords={"imported": trial_key[:16]},
        item=asked["item"],
        messages=asked["messages"],
        params={},
        replicate=0,
    )
    return trial, legacy_key


def source_name(path: Path) -> str:
    """How messages name the file: `stdin` for `-`, bytes that are not UTF-8 as `\\xNN`."""
    return "stdin" if str(path) == STDIN else shown_path(path)


def read_file(
    path: Path,
    max_line_bytes: int = MAX_LINE_BYTES,
    on_wait: Callable[[str], None] | None = None,
) -> list[ImportedReply]:
    """Validate every line, reading the file once (it may be a pipe); the first bad one raises
    with its number.

    Returns one reply per trial: exact repeats are folded into the first line's `copies`, and
    the same trial with another content is an error naming both lines. `on_wait` is told, in
    one line, when a pipe has said nothing for `WAIT_NOTICE_S` (its writer has not started),
    so a command waiting on it does not look hung."""
    name = source_name(path)
    if max_line_bytes < 1:
        raise ImportFileError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
    seen: dict[str, ImportedReply] = {}
    with _opened(path, name, on_wait) as fd:
        for number, raw in _lines(fd, name, max_line_bytes):
            if not raw.strip():
                continue
            try:
                reply = parse_line(raw, number)
            except ValueError as exc:
                raise ImportFileError(f"{name} line {number}: {exc}; nothing imported") from None
            key = reply.trial.trial_key
            first = seen.get(key)
            if first is None:
                seen[key] = reply
            elif first.content == reply.content:
                seen[key] = replace(first, copies=(*first.copies, number))
            else:
                raise ImportFileError(
                    f"{name} line {number}: the same trial as line {first.line} (same "
                    "experiment, model_id, language, item and messages) with a different "
                    "content; give each line its own 'id' to keep both as repetitions; "
                    "nothing imported"
                )
    if not seen:
        raise ImportFileError(f"{name}: no replies to import")
    return list(seen.values())


@contextmanager
def _opened(path: Path, name: str, on_wait: Callable[[str], None] | None) -> Iterator[int]:
    """A descriptor to read `path` from: a regular file or a pipe, else a one-line refusal.

    The kind is looked at with `stat` before the file is opened (opening a device can itself
    do something), the open never blocks (`O_NONBLOCK`: a FIFO without a writer would wait
    in `open`), and the descriptor is checked again, so a path swapped between the two looks
    is refused all the same. Standard input is used as it is, never closed."""
    if str(path) == STDIN:
        try:
            fd = sys.stdin.fileno()
            mode = os.fstat(fd).st_mode
        except (AttributeError, ValueError, OSError):
            raise ImportFileError("stdin: not open; pipe the replies in") from None
        if os.isatty(fd):
            raise ImportFileError(
                "stdin: is a terminal; pipe the replies in (ibias import - < replies.jsonl)"
            )
        _check_readable(name, mode)
        if stat.S_ISFIFO(mode):
            _wait_for_data(fd, name, on_wait)
        yield fd
        return
    if "\0" in str(path):
        raise ImportFileError(f"{name!r}: a path cannot hold a NUL byte")
    try:
        _check_readable(name, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ImportFileError(f"{name}: file not found") from None
    except OSError as exc:
        raise ImportFileError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        _check_readable(name, mode)
        os.set_blocking(fd, True)
        if stat.S_ISFIFO(mode):
            _wait_for_data(fd, name, on_wait)
        yield fd
    finally:
        os.close(fd)


def _check_readable(name: str, mode: int) -> None:
    """A regular file or a pipe; anything else is refused before a byte of it is read."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise ImportFileError(f"{name}: is a folder, not a JSONL file")
    raise ImportFileError(f"{name}: is {file_kind(mode)}, not a JSONL file or a pipe")


def _wait_for_data(fd: int, name: str, on_wait: Callable[[str], None] | None) -> None:
    """Wait until the pipe has data or its writers are gone (`poll`, so a FIFO whose writer
    has not opened it yet is not read as empty); say so once if that takes a while."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if poller.poll(int(WAIT_NOTICE_S * 1000)):
        return
    if on_wait is not None:
        on_wait(f"waiting for {name} (a pipe) to be written")
    poller.poll()


def _lines(fd: int, name: str, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(number, line without its newline) of the stream, read `CHUNK_BYTES` at a time; a line
    longer than `max_line_bytes` raises as soon as it is known to be, whole or not."""
    partial = bytearray()
    number = 0

    def too_long() -> ImportFileError:
        return ImportFileError(
            f"{name} line {number + 1}: longer than {max_line_bytes:,} bytes, the most a line "
            "may be (raise it with --max-line-bytes); nothing imported"
        )

    while True:
        try:
            chunk = os.read(fd, CHUNK_BYTES)
        except OSError as exc:
            raise ImportFileError(f"{name}: cannot read: {exc.strerror or exc}") from None
        if not chunk:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if len(partial) + end - start > max_line_bytes:
                raise too_long()
            line = bytes(partial + chunk[start:end]) if partial else chunk[start:end]
            partial.clear()
            number += 1
            yield number, line
            start = end + 1
        partial += chunk[start:]
        if len(partial) > max_line_bytes:
            raise too_long()
    if partial:
        yield number + 1, bytes(partial)


def _stored(
    con: duckdb.DuckDBPyConnection, table: str, column: str, keys: list[str]
) -> dict[str, Any]:
    """trial_key -> `column` of the rows of `table` whose key is among `keys`."""
    rows = con.execute(
        f"SELECT t.trial_key, t.{column} FROM {table} t "
        "JOIN (SELECT unnest(?::VARCHAR[]) AS trial_key) k ON t.trial_key = k.trial_key",
        [keys],
    ).fetchall()
    return {key: value for key, value in rows}


def _new_replies(
    con: duckdb.DuckDBPyConnection, path: Path, replies: list[ImportedReply]
) -> list[ImportedReply]:
    """The replies not stored yet; a trial stored with another content is an error."""
    stored = _stored(con, "responses", "content", [r.trial.trial_key for r in replies])
    for r in replies:
        key = r.trial.trial_key
        if key in stored and stored[key] != r.content:
            raise ImportFileError(
                f"{source_name(path)} line {r.line}: this trial is already stored with a "
                f"different content (trial_key {key[:16]}); give the line an 'id' to store it "
                "as a repetition; nothing imported"
            )
    legacy = _stored(con, "trials", "trial_key", [r.legacy_key for r in replies])
    return [r for r in replies if r.trial.trial_key not in stored and r.legacy_key not in legacy]


def prompt_checks(replies: list[ImportedReply], pack: StimuliPack) -> list[tuple[str, PromptCheck]]:
    """(trial_key, check) for each reply whose item names the paper design of a kind that
    renders one (`TrialKind.paper_prompts`); other replies are not checked."""
    out = []
    for r in replies:
        kind = registry.kind(r.trial.experiment)
        if kind is None or kind.paper_prompts is None or r.trial.item.get("design") != "paper":
            continue
        rendered = kind.paper_prompts(r.trial.item, pack)
        out.append((r.trial.trial_key, check_prompt(r.trial.messages, rendered)))
    return out


def _insert_checks(
    con: duckdb.DuckDBPyConnection, checks: list[tuple[str, PromptCheck]], stimuli: str
) -> None:
    """One statement for all rows (zipped unnests): `executemany` costs a round trip per row,
    which tripled the time of a checked import."""
    if checks:
        con.execute(
            "INSERT INTO prompt_checks (trial_key, status, difference, template, stimuli) "
            "SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
            "unnest(?::INTEGER[]), ?",
            [
                [key for key, _ in checks],
                [c.status for _, c in checks],
                [c.difference for _, c in checks],
                [c.template for _, c in checks],
                stimuli,
            ],
        ).fetchall()


def _record_import_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    now: datetime,
    path: Path,
    pack: StimuliPack | None,
) -> None:
    """The import's row in `runs`: its config names the file (and the pack it was checked
    against), so the store says where its imported trials came from. Bytes of the names that
    are not UTF-8 are kept as `\\xNN` (`shown_path`): DuckDB stores only UTF-8 text."""
    name = "stdin" if str(path) == STDIN else shown_path(path.name)
    con.execute(
        "INSERT INTO runs (run_id, started_at, config, config_hash, version, git_rev, "
        "command) VALUES (?, ?, ?, ?, ?, NULL, ?)",
        [
            run_id,
            now,
            f"# imported from {name}\n"
            + ("" if pack is None else f"# prompts checked against {shown_path(pack.root)}\n"),
            stable_hash(shown_path(path.name)),
            "import",
            f"ibias import {shown_path(path)}",
        ],
    ).fetchall()


def _response_row(reply: ImportedReply, run_id: str, now: datetime) -> ResponseRow:
    """An imported reply's stored row: its text and the model it names; no usage, cost or
    raw body (the file has none)."""
    return ResponseRow(
        trial_key=reply.trial.trial_key,
        run_id=run_id,
        model_id=reply.trial.model_id,
        provider_model=reply.provider_model,
        content=reply.content,
        refusal=None,
        finish_reason=None,
        prompt_tokens=None,
        completion_tokens=None,
        cost_usd=None,
        system_fingerprint=None,
        received_at=now,
        raw=None,
    )


def import_file(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    pack: StimuliPack | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> ImportResult:
    """Read and validate the file (`read_file`), then store it (`store_replies`)."""
    return store_replies(con, path, read_file(path, max_line_bytes), pack)


def store_replies(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    unique: list[ImportedReply],
    pack: StimuliPack | None = None,
) -> ImportResult:
    """Store the new replies `read_file` gave for `path` (and, with `pack`, each new
    paper-design reply's prompt check) in one transaction: all of them or, on any failure,
    none. The file is not read again (a pipe can be read only once)."""
    lines = sum(1 + len(r.copies) for r in unique)
    replies = _new_replies(con, path, unique)
    if not replies:
        return ImportResult(
            lines=lines, imported=0, already_present=lines, duplicates=lines - len(unique)
        )
    checks = prompt_checks(replies, pack) if pack is not None else []
    run_id = uuid.uuid4().hex
    now = datetime.now(UTC)
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        _record_import_run(con, run_id, now, path, pack)
        insert_trials(con, run_id, [r.trial for r in replies])
        new = insert_responses(con, [_response_row(r, run_id, now) for r in replies])
        if pack is not None:
            _insert_checks(con, checks, str(pack.root))
        parse_pending(con)
        con.execute("COMMIT").fetchall()
    except BaseException:
        con.execute("ROLLBACK").fetchall()
        raise
    counted: dict[str, int] = {}
    for _key, check in checks:
        counted[check.status] = counted.get(check.status, 0) + 1
    return ImportResult(
        lines=lines,
        imported=new,
        already_present=lines - new,
        duplicates=lines - len(unique),
        checked=counted,
    )

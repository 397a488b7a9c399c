"""`ibias show`: one trial as a person wants to read it.

Its design coordinates, the exact messages sent, every attempt (across runs: a resumed trial
shows the attempts of each run), the reply, and what the parser made of it. A trial is chosen
by its key (a unique prefix is enough, as with git commits), or by `--model`, `--experiment`
and `--where` (a condition on the `replies` view), first in plan order or `--random N` among
the answered ones (`--unanswered`: among those without a reply).

All reading is in `read_trials`, which takes an open read connection and nothing else: the
command opens it in the SQL sandbox (store/sandbox.py), since `--where` is the user's SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import duckdb
import orjson

from ibias import errors
from ibias.store.db import StoreAccessError

_KEY = re.compile(r"\A[0-9a-f]{1,64}\Z")


class ShowError(errors.StoreError):
    """A selection that names no trial, or several where one was meant: one line for the user."""


@dataclass(frozen=True)
class Selection:
    """Which trials to show: a key (or unique prefix), or filters and how many."""

    key: str | None = None
    model: str | None = None
    experiment: str | None = None
    where: str | None = None
    random: int | None = None
    #: True: only trials with a reply; False: only those without; None: any. The command
    #: picks `--random` among answered trials (during a run most trials have no reply yet,
    #: and a random one would almost always be empty) and `--unanswered` among the others.
    answered: bool | None = None


@dataclass(frozen=True)
class Attempt:
    run_id: str
    attempt_no: int
    started_at: datetime
    latency_ms: float | None
    http_status: int | None
    error_kind: str | None
    error_message: str | None
    outcome: str


@dataclass(frozen=True)
class Reply:
    content: str | None
    finish_reason: str | None
    refusal: str | None
    provider_model: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    received_at: datetime
    run_id: str


@dataclass(frozen=True)
class TrialView:
    """Everything the store knows about one trial."""

    trial_key: str
    experiment: str
    design: str | None
    model_id: str
    language: str
    replicate: int
    coords: Mapping[str, Any]
    item: Mapping[str, Any]
    messages: Sequence[Mapping[str, Any]]
    params: Mapping[str, Any]
    planned_by: str
    attempts: tuple[Attempt, ...]
    reply: Reply | None
    parsed: Mapping[str, Any] | None
    parser_version: int | None

    def to_json(self) -> dict[str, Any]:
        def plain(obj: Any) -> Any:
            return {
                k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in vars(obj).items()
            }

        return {
            **{k: v for k, v in vars(self).items() if k not in ("attempts", "reply")},
            "attempts": [plain(a) for a in self.attempts],
            "reply": None if self.reply is None else plain(self.reply),
        }


def _has_replies_view(con: duckdb.DuckDBPyConnection) -> bool:
    rows = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'replies'"
    ).fetchall()
    return bool(rows[0][0])


def _keys(con: duckdb.DuckDBPyConnection, sel: Selection) -> list[str]:
    """The keys the selection names, in the order to show them."""
    if sel.key is not None:
        return _key_by_prefix(con, sel.key)
    source = "trials"
    conditions: list[str] = []
    params: list[Any] = []
    if sel.where is not None:
        if not _has_replies_view(con):
            raise ShowError(
                "this store has no `replies` view yet; open it once with `ibias run` or "
                "`ibias analyze` (they add it), then use --where"
            )
        source = "replies"
        conditions.append(f"({sel.where}\n)")
    if sel.model is not None:
        conditions.append("model_id = ?")
        params.append(sel.model)
    if sel.experiment is not None:
        conditions.append("experiment = ?")
        params.append(sel.experiment)
    if sel.answered is not None:
        negate = "" if sel.answered else "NOT "
        conditions.append(f"trial_key {negate}IN (SELECT trial_key FROM responses)")
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    # Plan order (insertion order of the trial rows: `trials` is a view, without rowids) for
    # "the first"; random() for --random.
    order = "random()" if sel.random is not None else "min(t.rowid)"
    limit = sel.random or 1
    query = (
        f"SELECT t.trial_key FROM trial_rows t WHERE t.trial_key IN "
        f"(SELECT trial_key FROM {source} {where}) GROUP BY t.trial_key "
        f"ORDER BY {order} LIMIT {int(limit)}"
    )
    _check_read(query)
    try:
        keys = [r[0] for r in con.execute(query, params).fetchall()]
    except (duckdb.Error, StoreAccessError) as exc:  # the reader's one-line refusal
        message = _first_line(str(exc)).removeprefix("query failed: ")
        raise ShowError(f"--where failed: {message}") from None
    if not keys:
        raise _nothing_matches(sel)
    return keys


def _key_by_prefix(con: duckdb.DuckDBPyConnection, given: str) -> list[str]:
    """The one trial key that starts with `given`; none, or several, is an error."""
    key = given.lower()
    if not _KEY.match(key):
        raise ShowError(f"{given!r} is not a trial key (64 hex digits, or a prefix)")
    found = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT trial_key FROM trials WHERE starts_with(trial_key, ?) LIMIT 2",
            [key],
        ).fetchall()
    ]
    if not found:
        raise ShowError(f"no trial with a key starting {key!r} in this store")
    if len(found) > 1:
        raise ShowError(f"several trials have keys starting {key!r}; give more of the key")
    return found


def _nothing_matches(sel: Selection) -> ShowError:
    """The error for a selection no trial matches, naming what was asked (and, for
    --answered or --unanswered, where the others are)."""
    asked = ", ".join(
        f"{name} {value!r}"
        for name, value in (
            ("--model", sel.model),
            ("--experiment", sel.experiment),
            ("--where", sel.where),
        )
        if value is not None
    )
    if sel.answered is not None:
        which = "answered" if sel.answered else "unanswered"
        other = "--unanswered shows the others" if sel.answered else "all are answered"
        return ShowError(
            f"no {which} trial matches {asked} ({other})"
            if asked
            else f"the store has no {which} trials yet ({other})"
        )
    return ShowError(f"no trial matches {asked}" if asked else "the store has no trials")


def _check_read(query: str) -> None:
    """The composed query must still be exactly one read (a --where cannot add a statement)."""
    from ibias.store.db import StoreAccessError
    from ibias.store.sandbox import read_statement

    try:
        read_statement(query)
    except StoreAccessError as exc:
        raise ShowError(f"--where: {exc}") from None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def read_trials(con: duckdb.DuckDBPyConnection, sel: Selection) -> list[TrialView]:
    """The selected trials with everything stored about them. The only function here that
    reads the store; `con` is an open read connection (sandboxed by the caller)."""
    keys = _keys(con, sel)
    parsed = _parsed_by_key(con, keys)
    trials = {
        r[0]: r
        for r in con.execute(
            "SELECT t.trial_key, t.experiment, t.model_id, t.language, t.replicate, s.coords, "
            "s.item, s.messages, t.params, t.run_id FROM trial_rows t "
            "JOIN trial_specs s ON s.spec_key = t.spec_key WHERE list_contains(?, t.trial_key) "
            "QUALIFY row_number() OVER (PARTITION BY t.trial_key ORDER BY t.rowid) = 1",
            [keys],
        ).fetchall()
    }
    attempts = _attempts_by_key(con, keys)
    replies = _first_replies(con, keys)
    out = []
    for key in keys:
        t = trials[key]
        design, parse, version = parsed.get(key, (None, None, None))
        out.append(
            TrialView(
                trial_key=key,
                experiment=t[1],
                design=design,
                model_id=t[2],
                language=t[3],
                replicate=int(t[4]),
                coords=orjson.loads(t[5]),
                item=orjson.loads(t[6]),
                messages=orjson.loads(t[7]),
                params=orjson.loads(t[8]),
                planned_by=t[9],
                attempts=tuple(attempts[key]),
                reply=replies.get(key),
                parsed=None if parse is None else orjson.loads(parse),
                parser_version=version,
            )
        )
    return out


def _parsed_by_key(
    con: duckdb.DuckDBPyConnection, keys: list[str]
) -> dict[str, tuple[Any, Any, Any]]:
    """Each trial's design, parsed reply and parser version, from the `replies` view (none
    when the store has no view yet)."""
    if not _has_replies_view(con):
        return {}
    rows = con.execute(
        "SELECT trial_key, design, parsed, parser_version FROM replies "
        "WHERE list_contains(?, trial_key)",
        [keys],
    ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _attempts_by_key(con: duckdb.DuckDBPyConnection, keys: list[str]) -> dict[str, list[Attempt]]:
    """Each trial's attempts, every run's, in the order they started."""
    attempts: dict[str, list[Attempt]] = {k: [] for k in keys}
    for r in con.execute(
        "SELECT trial_key, run_id, attempt_no, started_at, latency_ms, http_status, error_kind, "
        "error_message, outcome FROM attempts WHERE list_contains(?, trial_key) "
        "ORDER BY started_at, attempt_no",
        [keys],
    ).fetchall():
        attempts[r[0]].append(Attempt(*r[1:]))
    return attempts


def _first_replies(con: duckdb.DuckDBPyConnection, keys: list[str]) -> dict[str, Reply]:
    """Each answered trial's earliest stored reply."""
    return {
        r[0]: Reply(*r[1:])
        for r in con.execute(
            "SELECT trial_key, content, finish_reason, refusal, provider_model, prompt_tokens, "
            "completion_tokens, cost_usd, received_at, run_id FROM responses "
            "WHERE list_contains(?, trial_key) "
            "QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY received_at) = 1",
            [keys],
        ).fetchall()
    }


def show(store: Path, sel: Selection) -> list[TrialView]:
    """Read the selection through the store's read entry point: the SQL sandbox on the file, or
    the running process's snapshot while a run holds the store (the command's entry point)."""
    from ibias.store.reader import open_reader

    with open_reader(store) as reader:
        # read_trials only calls execute(...).fetchall()/fetchone(), which the reader provides.
        return read_trials(cast("duckdb.DuckDBPyConnection", reader), sel)


# ---------------------------------------------------------------------------- rendering


def _compact(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _block(text: str | None, indent: str = "    ") -> str:
    """`text` indented, line by line. Lines are split at newlines only (`str.splitlines` and
    `textwrap.indent` also split at CR, FF, U+2028 and others, and would add indentation that
    is not in the text): the other characters are left for `literal` to show."""
    if text is None:
        return f"{indent}(none)"
    if text == "":
        return f"{indent}(empty)"
    return "\n".join(indent + line for line in text.split("\n"))


def render_text(t: TrialView) -> str:
    """The trial as plain text: no markup, so brackets and quotes in prompts print as sent,
    and control characters escaped (runner/console.py), so a reply holding an escape sequence
    shows it rather than colouring or clearing the terminal."""
    from ibias.runner.console import literal

    return literal(_text(t))


def _text(t: TrialView) -> str:
    lines = [f"trial {t.trial_key}"]
    design = f" ({t.design} design)" if t.design else ""
    lines.append(
        f"  {t.experiment}{design}, model {t.model_id}, language {t.language}, "
        f"replicate {t.replicate}"
    )
    lines.append(f"  coordinates: {_compact(t.coords)}")
    lines.append(f"  item: {_compact(t.item)}")
    lines.append(f"  parameters: {_compact(t.params)}")
    lines.append(f"messages sent ({len(t.messages)}):")
    for m in t.messages:
        lines.append(f"  [{m.get('role', '?')}]")
        lines.append(_block(str(m.get("content", ""))))
    lines.append(f"attempts ({len(t.attempts)}):")
    if not t.attempts:
        lines.append("    (none yet)")
    for a in t.attempts:
        when = f"{a.started_at:%Y-%m-%d %H:%M:%S %z}".strip()
        parts = [f"    #{a.attempt_no} {when} {a.outcome}"]
        if a.http_status is not None:
            parts.append(f"HTTP {a.http_status}")
        if a.latency_ms is not None:
            parts.append(f"{a.latency_ms:.0f} ms")
        if a.error_kind:
            parts.append(a.error_kind)
        if a.error_message:
            parts.append(" ".join(a.error_message.split())[:200])
        lines.append(", ".join(parts) + f" (run {a.run_id[:8]})")
    r = t.reply
    if r is None:
        lines.append("reply: none stored")
    else:
        usage = f"{r.prompt_tokens or 0}+{r.completion_tokens or 0} tokens"
        cost = f", ${r.cost_usd:.6f}" if r.cost_usd is not None else ""
        model = f", model {r.provider_model}" if r.provider_model else ""
        lines.append(f"reply (finish_reason {r.finish_reason}, {usage}{cost}{model}):")
        lines.append(_block(r.content))
        if r.refusal:
            lines.append(f"  refusal: {r.refusal}")
    if t.parsed is None:
        lines.append("parsed: " + ("not parsed" if r is not None else "-"))
    else:
        lines.append(f"parsed (parser version {t.parser_version}): {_compact(t.parsed)}")
    return "\n".join(lines)

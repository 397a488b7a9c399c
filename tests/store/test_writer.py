"""The single writer's conversion: rows appended as tuples on the loop, converted (and the raw
body serialised) on the writer's thread, responses kept once per trial."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import orjson

from ibias.store.db import open_store
from ibias.store.writer import _SPARSE, AttemptRow, Landed, ResponseRow, Writer, to_arrow

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _response(key: str, raw: object) -> ResponseRow:
    return ResponseRow(
        key,
        "r",
        "m",
        "pm",
        "text",
        None,
        "stop",
        3,
        1,
        0.5,
        None,
        NOW,
        raw,  # type: ignore[arg-type]
    )


def test_to_arrow_keeps_every_column_and_serialises_a_decoded_body():
    body = {"choices": [{"message": {"content": "é"}}], "usage": {"prompt_tokens": 3}}
    table = to_arrow(
        [_response("k1", body), _response("k2", '{"a":1}'), _response("k3", None)], ResponseRow
    )
    # reasoning and logprobs columns (migrations 006, 007) are left out of a batch where no
    # row has any
    assert table.column_names == [f for f in ResponseRow._fields if f not in _SPARSE]
    assert table.column("raw").to_pylist() == [orjson.dumps(body).decode(), '{"a":1}', None]
    assert table.column("trial_key").to_pylist() == ["k1", "k2", "k3"]
    attempts = to_arrow(
        [AttemptRow("r", "k1", "m", 1, NOW, 1.5, 200, None, None, "ok")], AttemptRow
    )
    assert attempts.to_pylist()[0]["started_at"] == NOW


async def test_a_flush_stores_rows_once_and_hands_landed_replies_to_the_parser(tmp_path):
    con = open_store(tmp_path / "w.duckdb", create=True)
    seen: list[Landed] = []
    writer = Writer(con, interval=0.01, on_landed=lambda c, landed: seen.extend(landed))
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        for key in ("k1", "k2", "k1"):  # k1 answered twice: stored once
            writer.add_attempt(AttemptRow("r", key, "m", 1, NOW, 2.0, 200, None, None, "ok"))
            writer.add_response(
                _response(key, {"id": key}), Landed(key, "prompts", {"id": key}, "text")
            )
        await writer.close()
    rows = con.execute(
        "SELECT trial_key, raw, received_at FROM responses ORDER BY trial_key"
    ).fetchall()
    assert [(k, orjson.loads(raw)) for k, raw, _ in rows] == [
        ("k1", {"id": "k1"}),
        ("k2", {"id": "k2"}),
    ]
    assert rows[0][2] == NOW
    assert con.execute("SELECT count(*) FROM attempts").fetchall()[0][0] == 3
    assert [landed.trial_key for landed in seen] == ["k1", "k2", "k1"]
    con.close()


def test_epoch_seconds_become_the_same_timestamps_as_datetimes():
    epoch = NOW.timestamp() + 0.123456
    rows = [
        AttemptRow("r", "k1", "m", 1, epoch, 1.0, 200, None, None, "ok"),
        AttemptRow(
            "r", "k2", "m", 1, datetime.fromtimestamp(epoch, UTC), 1.0, 200, None, None, "ok"
        ),
    ]
    got = to_arrow(rows, AttemptRow).column("started_at").to_pylist()
    assert got[0] == got[1] == datetime.fromtimestamp(epoch, UTC)


def test_reasoning_is_stored_beside_the_reply(tmp_path):
    """A batch where one reply has reasoning keeps the columns, NULL for the others."""
    con = open_store(tmp_path / "w.duckdb", create=True)
    from ibias.store.writer import insert_responses

    rows = [
        _response("k1", None)._replace(reasoning_content="thought", reasoning_tokens=7),
        _response("k2", None),
    ]
    assert insert_responses(con, rows) == 2
    got = con.execute(
        "SELECT trial_key, content, reasoning_content, reasoning_tokens FROM responses ORDER BY 1"
    ).fetchall()
    assert got == [("k1", "text", "thought", 7), ("k2", "text", None, None)]
    con.close()


def test_a_batch_answering_a_trial_twice_keeps_its_first_reply(tmp_path):
    """Duplicates inside a batch are dropped in Python (first row wins, not an arbitrary one
    as a window function picks), and a trial that already has a response gets no second."""
    con = open_store(tmp_path / "w.duckdb", create=True)
    from ibias.store.writer import insert_responses

    first = _response("k1", None)._replace(content="first")
    again = _response("k1", None)._replace(content="second")
    assert insert_responses(con, [first, _response("k2", None), again]) == 2
    assert insert_responses(con, [_response("k2", None)._replace(content="late")]) == 0
    got = con.execute("SELECT trial_key, content FROM responses ORDER BY 1").fetchall()
    assert got == [("k1", "first"), ("k2", "text")]
    con.close()

"""The ``sqlite`` sink: every produced message is one row, across stops, crashes and restarts.

Over real TCP against the embedded broker; the crash is a SIGKILL of ``rmqk run``
in the middle of the backlog, before its offsets are persisted, so the restart
consumes again what was already written and must skip it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import start_rmqk
from engine_support import create_topic, produce, wait_for

from rmqk.model.errors import ConfigError
from rmqk.plugins.sinks.sqlite import SqliteSink

pytestmark = pytest.mark.timeout(180)

TOTAL = 4_000


@pytest.fixture
async def backlog(broker_factory: Callable[..., Awaitable[Any]]) -> Any:
    broker = await broker_factory()
    await create_topic(broker, "Rows", 4)
    sent = await produce(broker.namesrv_addr, "Rows", (f"r{i}".encode() for i in range(TOTAL)))
    assert sent == TOTAL
    return broker


def _config(tmp_path: Path, namesrv: str, db: Path, group: str = "g-sqlite") -> Path:
    path = tmp_path / f"{group}.toml"
    path.write_text(
        "[consumers.rows]\n"
        f'group = "{group}"\n'
        f'namesrv_addr = "{namesrv}"\n'
        'subscription = { Rows = "*" }\n'
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"\n'
        # Slow enough (about 1,600 messages/s) to stop in the middle of the backlog.
        "pull_batch_size = 16\n"
        "pull_interval = 40\n"
        # Offsets reach the broker with the pulls only: a crash replays more.
        "persist_consumer_offset_interval = 600000\n"
        'sink = "sqlite"\n'
        "[consumers.rows.sink_options]\n"
        f'path = "{db}"\n'
        'table = "rows"\n'
    )
    return path


def _rows(db: Path) -> int:
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        try:
            return int(conn.execute('SELECT count(*) FROM "rows"').fetchone()[0])
        except sqlite3.OperationalError:  # not created yet
            return 0


def _check_each_message_once(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute('SELECT queue_id, queue_offset, body, topic FROM "rows"').fetchall()
        ranges = conn.execute('SELECT queue_id, first, last FROM "rows_offsets"').fetchall()
    assert len(rows) == TOTAL
    assert {body for _, _, body, _ in rows} == {f"r{i}".encode() for i in range(TOTAL)}
    assert len({(q, o) for q, o, _, _ in rows}) == TOTAL
    assert {topic for *_, topic in rows} == {"Rows"}
    # The committed ranges cover every row, and nothing else.
    covered = {(q, o) for q, first, last in ranges for o in range(first, last + 1)}
    assert covered == {(q, o) for q, o, _, _ in rows}


async def _finish(config: Path, db: Path, replayed: int = 0) -> Any:
    """Run the consumer in this process until every message is a row (and ``replayed``
    rows were skipped); its sink's stats."""
    from rmqk.app.config import load_config
    from rmqk.app.runtime import ComposedConsumer

    composed = ComposedConsumer(load_config(config).consumers[0])
    sink: Any = composed.sink
    await composed.start()
    try:
        await wait_for(lambda: _rows(db) >= TOTAL, 120, "every message as a row")
        await wait_for(lambda: sink.stats.rows_skipped >= replayed, 120, "the replay")
        await asyncio.sleep(1.0)  # anything written twice would show up meanwhile
    finally:
        await composed.stop()
    return sink.stats


async def test_kill_9_mid_backlog_then_restart_writes_each_message_once(
    backlog: Any, tmp_path: Path
) -> None:
    db = tmp_path / "out.db"
    config = _config(tmp_path, backlog.namesrv_addr, db)
    proc = start_rmqk("run", str(config), stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while _rows(db) < TOTAL // 4:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the first run wrote nothing"
            await asyncio.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    before = _rows(db)
    assert 0 < before < TOTAL, "the kill must land in the middle of the backlog"

    stats = await _finish(config, db)
    assert stats.rows_written == TOTAL - before
    _check_each_message_once(db)
    # A replay of everything (a new group from the first offset) writes nothing again.
    replay = await _finish(_config(tmp_path, backlog.namesrv_addr, db, "g-replay"), db, TOTAL)
    assert (replay.rows_written, replay.rows_skipped) == (0, TOTAL)
    _check_each_message_once(db)


async def test_stop_and_restart_mid_backlog_writes_each_message_once(
    backlog: Any, tmp_path: Path
) -> None:
    from rmqk.app.config import load_config
    from rmqk.app.runtime import ComposedConsumer

    db = tmp_path / "out.db"
    config = _config(tmp_path, backlog.namesrv_addr, db)
    composed = ComposedConsumer(load_config(config).consumers[0])
    await composed.start()
    try:
        await wait_for(lambda: _rows(db) >= TOTAL // 4, 60, "a quarter of the backlog")
    finally:
        await composed.stop()
    before = _rows(db)
    assert 0 < before < TOTAL

    stats = await _finish(config, db)
    assert stats.rows_written == TOTAL - before
    _check_each_message_once(db)


def test_bad_options_name_every_key() -> None:
    with pytest.raises(ConfigError) as caught:
        SqliteSink({"table": "rows; DROP TABLE x", "flush": 1})
    problems = {p.key: p.message for p in caught.value.problems}
    assert set(problems) == {"path", "table", "flush"}
    assert "required" in problems["path"]
    assert "plain SQL table name" in problems["table"]
    assert "unknown option" in problems["flush"]
    assert all(p.table == "sqlite" for p in caught.value.problems)
    with pytest.raises(ConfigError, match="path"):
        SqliteSink({"path": ""})
    with pytest.raises(ConfigError, match="table"):
        SqliteSink({"path": "x.db", "table": 7})


def test_registered_as_sqlite_with_a_default_table(tmp_path: Path) -> None:
    from rmqk.pluginmanager import registries
    from rmqk.spi.contracts import SinkContext

    sink = registries().sinks.create("sqlite", SinkContext(), {"path": str(tmp_path / "x.db")})
    assert isinstance(sink, SqliteSink)
    assert sink.table == "messages"
    assert sink.window_rows > 0


async def test_rows_and_offsets_commit_together(tmp_path: Path) -> None:
    """A commit that fails after its rows are inserted leaves neither rows nor offsets."""
    from rmqk.model import MessageQueue
    from rmqk.model.message import MessageExt

    def message(offset: int) -> MessageExt:
        return MessageExt(topic="T", body=b"x", queue_id=0, queue_offset=offset)

    q = MessageQueue("T", "broker-a", 0)
    db = tmp_path / "t.db"
    sink = SqliteSink({"path": str(db), "table": "t"})
    await sink.start()
    try:
        await sink.write(q, [message(0), message(1)])
        # The offsets are inserted after the rows, in the same transaction: refuse them.
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
            conn.execute(
                'CREATE TRIGGER refuse BEFORE INSERT ON "t_offsets" WHEN NEW.first = 2 '
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        with pytest.raises(sqlite3.DatabaseError, match="refused"):
            await sink.write(q, [message(2)])
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
            conn.execute("DROP TRIGGER refuse")
        await sink.write(q, [message(1), message(2)])  # offset 1 again: skipped
    finally:
        await sink.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        offsets = conn.execute('SELECT queue_offset FROM "t" ORDER BY 1').fetchall()
        ranges = conn.execute('SELECT first, last FROM "t_offsets" ORDER BY 1').fetchall()
    assert offsets == [(0,), (1,), (2,)]
    assert ranges == [(0, 1), (1, 2)]  # a batch's whole span, 1 included
    assert (sink.stats.rows_written, sink.stats.rows_skipped) == (3, 1)
    assert sink.stats.failed_flushes == 1

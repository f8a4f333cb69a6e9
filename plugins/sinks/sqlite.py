"""The ``sqlite`` sink: messages into a SQLite table, exactly once.

Options: ``path`` (the database file, created if missing) and ``table``
(default ``messages``). Each flush is one transaction that inserts the rows
into ``table`` and the offset ranges they cover into ``<table>_offsets``, so
after a crash either both are there (the messages, consumed again, are
skipped) or neither (they are written again): no row is lost or duplicated.
Several consumers and processes may share a database: ``BEGIN IMMEDIATE``
makes each commit exclusive, and :meth:`~GroupCommitSink.claim` drops rows
another writer committed first.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink
from rmqk.plugins.sinks.offsetranges import OffsetRange
from rmqk.plugins.sinks.sqlite_options import SqliteOptions, parse_sqlite_options
from rmqk.spi.contracts import SinkContext
from rmqk.spi.factory import PluginFactory

__all__ = ["SQLITE_SINK", "SqliteSink"]

_COLUMNS = (
    "topic TEXT, broker TEXT, queue_id INTEGER, queue_offset INTEGER, msg_id TEXT, keys TEXT, "
    "tags TEXT, properties TEXT, body BLOB, born_timestamp INTEGER, store_timestamp INTEGER, "
    "reconsume_times INTEGER"
)


class SqliteSink(GroupCommitSink):
    sink_name: ClassVar[str] = "sqlite"

    def __init__(self, options: Mapping[str, Any] | SqliteOptions) -> None:
        parsed = options if isinstance(options, SqliteOptions) else parse_sqlite_options(options)
        self.path, self.table = parsed.path, parsed.table
        self._db: sqlite3.Connection | None = None
        self._last_id = 0
        super().__init__(FlushTriggers(rows=5000, seconds=0.2), target=self.path, exactly_once=True)

    def open_output(self) -> None:
        # Autocommit mode: the transactions are the explicit BEGIN ... COMMIT below.
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f'CREATE TABLE IF NOT EXISTS "{self.table}" ({_COLUMNS})')
        db.execute(
            f'CREATE TABLE IF NOT EXISTS "{self.table}_offsets" (id INTEGER PRIMARY KEY, '
            "topic TEXT, broker TEXT, queue_id INTEGER, first INTEGER, last INTEGER)"
        )
        self._db = db

    def committed_ranges(self) -> Iterable[OffsetRange]:
        assert self._db is not None
        rows = self._db.execute(
            f'SELECT id, topic, broker, queue_id, first, last FROM "{self.table}_offsets" '
            "WHERE id > ? ORDER BY id",
            (self._last_id,),
        ).fetchall()
        if rows:
            self._last_id = rows[-1][0]
        return [OffsetRange(*row[1:]) for row in rows]

    def write_batch(self, flush: Flush) -> int:
        db = self._db
        assert db is not None
        db.execute("BEGIN IMMEDIATE")
        try:
            self.claim(flush, self.committed_ranges())
            db.executemany(
                f'INSERT INTO "{self.table}" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [
                    (
                        m.topic,
                        q.broker_name,
                        q.queue_id,
                        m.queue_offset,
                        m.msg_id,
                        m.keys,
                        m.tags,
                        json.dumps(dict(m.properties)),
                        bytes(m.body),
                        m.born_timestamp,
                        m.store_timestamp,
                        m.reconsume_times,
                    )
                    for q, messages in flush.batches
                    for m in messages
                ],
            )
            db.executemany(
                f'INSERT INTO "{self.table}_offsets" (topic, broker, queue_id, first, last) '
                "VALUES (?, ?, ?, ?, ?)",
                [(r.topic, r.broker, r.queue_id, r.first, r.last) for r in flush.ranges],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return flush.rows

    def close_output(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def build_sqlite_sink(context: SinkContext, options: SqliteOptions) -> SqliteSink:
    """The registered factory of ``sqlite``."""
    return SqliteSink(options)


# The sink_options it takes are declared: the kernel checks a consumer's table.
SQLITE_SINK: PluginFactory[SinkContext, SqliteSink] = PluginFactory(
    "sqlite", build_sqlite_sink, options=SqliteOptions
)

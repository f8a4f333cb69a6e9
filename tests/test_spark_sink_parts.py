"""A flush of several parts built ahead lands as the same rows as one batch built whole.

With binary bodies the Arrow writer takes the parts as one table of many chunks
(no copy into one batch); other body formats, and exactly once, still get them
combined. Either way the file holds every row once, in order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import pyarrow as pa
import pyarrow.parquet as pq

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.spark import arrow_writer
from rmqk.plugins.spark.columns import messages_to_arrow
from rmqk.plugins.spark.sink import OutputWriter, SparkSink


def _batches() -> list[tuple[MessageQueue, list[MessageExt]]]:
    return [
        (
            MessageQueue("T", "broker-a", q),
            [
                MessageExt(
                    topic="T",
                    body=f"body {q}-{i}".encode(),
                    queue_id=q,
                    queue_offset=i,
                    store_host="127.0.0.1:10911",
                    properties={"UNIQ_KEY": f"U{q}-{i}", "TAGS": "t"},
                )
                for i in range(40)
            ],
        )
        for q in range(3)
    ]


async def _sink_all(options: dict[str, Any]) -> None:
    sink = SparkSink({"flush_rows": 120, "flush_seconds": 30, "writer": "arrow", **options})
    await sink.start()
    futures = [sink.submit(q, msgs) for q, msgs in _batches()]
    await asyncio.gather(*futures)
    await sink.close()


@pytest.mark.parametrize(
    ("body_format", "exactly_once", "as_table"),
    [("binary", False, True), ("binary", True, True), ("text", False, False)],
)
async def test_a_flush_of_many_parts_writes_every_row_once_in_order(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    body_format: str,
    exactly_once: bool,
    as_table: bool,
) -> None:
    # Parts of 16 rows: each 40-row batch is a part of its own, so the flush has three.
    monkeypatch.setattr(OutputWriter, "part_rows", 16)
    seen: list[tuple[type, int]] = []
    write = arrow_writer.ArrowFileWriter.write

    def spy(self: Any, batch: Any, *args: Any, **kwargs: Any) -> list[str]:
        chunks = batch.column(0).num_chunks if isinstance(batch, pa.Table) else 1
        seen.append((type(batch), chunks))
        return write(self, batch, *args, **kwargs)

    monkeypatch.setattr(arrow_writer.ArrowFileWriter, "write", spy)
    out = tmp_path / "out"
    await _sink_all({"path": str(out), "body_format": body_format, "exactly_once": exactly_once})
    assert seen == ([(pa.Table, 3)] if as_table else [(pa.RecordBatch, 1)])
    files = sorted(out.rglob("*.parquet"))
    assert len(files) == 1
    written = pq.read_table(files[0])
    expected = pa.Table.from_batches([messages_to_arrow(_batches())])
    assert written.num_rows == 120
    assert written.column("msg_id").to_pylist() == expected.column("msg_id").to_pylist()
    assert written.column("queue_offset").to_pylist() == expected.column("queue_offset").to_pylist()
    bodies = written.column("body").to_pylist()
    want = expected.column("body").to_pylist()
    assert bodies == (want if body_format == "binary" else [b.decode() for b in want])

"""What the Spark sink's test modules share: the session, messages, consumer configs, checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rmqk.model.message import MessageExt

if TYPE_CHECKING:
    from rmqk.plugins.spark.demo import ProduceResult

__all__ = ["check_exactly_once", "consumer_toml", "message", "orders_topic", "spark_session"]


@pytest.fixture(scope="module", name="spark")
def spark_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from rmqk.plugins.spark.session import get_session, stop_session

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = get_session(
        conf={"spark.driver.memory": "1g", "spark.sql.warehouse.dir": str(warehouse)}
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    stop_session()


def message(queue_id: int, offset: int, body: dict[str, Any]) -> MessageExt:
    return MessageExt(
        topic="Orders",
        body=json.dumps(body).encode(),
        queue_id=queue_id,
        queue_offset=offset,
        born_timestamp=1_700_000_000_000 + offset,
        store_timestamp=1_700_000_000_500 + offset,
        store_host="127.0.0.1:10911",
        properties={"TAGS": "paid", "KEYS": f"O-{offset}", "UNIQ_KEY": f"ID-{queue_id}-{offset}"},
    )


def consumer_toml(
    path: Path, namesrv: str, group: str, sink_options: dict[str, Any], **options: Any
) -> Path:
    lines = [
        "[consumers.orders]",
        f'group = "{group}"',
        f'namesrv_addr = "{namesrv}"',
        'subscription = { Orders = "created || paid || shipped || cancelled" }',
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"',
        "consume_message_batch_max_size = 32",
        "consume_thread_max = 500",
        "pull_threshold_for_queue = 2000",
        'sink = "spark"',
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in options.items()]
    lines.append("[consumers.orders.sink_options]")
    lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in sink_options.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def check_exactly_once(spark: Any, out: Path, msg_ids: tuple[str, ...]) -> None:
    df = spark.read.parquet(str(out))
    rows = df.select("msg_id", "queue_id", "queue_offset").collect()
    ids = [r.msg_id for r in rows]
    assert len(ids) == len(msg_ids), f"{len(ids)} rows for {len(msg_ids)} messages"
    assert set(ids) == set(msg_ids)
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == len(msg_ids)


async def orders_topic(broker: Any, count: int) -> ProduceResult:
    """Topic Orders, four queues, ``count`` demo orders sent to it; returns what was sent."""
    from rmqk.plugins.spark.demo import produce_orders

    await broker.create_topic("Orders", queues=4)
    return await produce_orders(broker.namesrv_addr, count, topic="Orders")

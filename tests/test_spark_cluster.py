"""The ``rocketmq`` source and the ``spark`` sink on a Spark standalone cluster, not ``local[*]``.

One master and two one-core workers, started once for the module from the pyspark
package itself (bench/spark_standalone.py), on loopback beside the embedded broker:

* docs/spark.md's spark-submit example, run by ``spark-submit --master spark://...``;
* a batch read: every message once, each queue one partition, tasks on both workers;
* the sink writing through the cluster's executors, exactly once;
* a streaming query whose second worker is killed with -9 (with its executor) while a
  task of a micro-batch runs there: Spark reruns the task on the other worker and the
  Parquet output still holds every message exactly once.

Which worker ran a task is read from the task itself (an executor's working directory is
``<worker work dir>/<app id>/<executor id>``) and from the driver's REST API.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from bench.spark_standalone import (  # noqa: E402
    StandaloneCluster,
    app_executors,
    free_port,
    spark_home,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: F401
except ImportError:  # PySpark 4.0 / 4.1: availableNow reads everything in one batch
    _ADMISSION_CONTROL = False
else:
    _ADMISSION_CONTROL = True

QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(
        workers=2, cores=1, memory="1g", root=tmp_path_factory.mktemp("sa")
    ) as c:
        yield c


@pytest.fixture(scope="module")
def spark(cluster: StandaloneCluster) -> Iterator[Any]:
    from rmqk.plugins.spark.session import get_session, stop_session

    session = get_session(
        master=cluster.url,
        app_name="rmqk-cluster-tests",
        conf={
            "spark.executor.memory": "512m",
            # The driver's REST API tells which executor ran how many tasks.
            "spark.ui.enabled": "true",
            "spark.ui.port": str(free_port()),
        },
    )
    try:
        session.sparkContext.setLogLevel("ERROR")
        _wait_for_executors(session, 2)
        yield session
    finally:
        stop_session()


def _executors(spark: Any) -> list[dict[str, Any]]:
    sc = spark.sparkContext
    return [e for e in app_executors(sc.uiWebUrl, sc.applicationId) if e["id"] != "driver"]


def _wait_for_executors(spark: Any, count: int) -> None:
    # Tasks only spread over both workers if both executors are there when a job starts.
    deadline = time.monotonic() + 240
    while len([e for e in _executors(spark) if e["isActive"]]) < count:
        assert time.monotonic() < deadline, f"executors: {_executors(spark)}"
        time.sleep(0.5)


def _tasks_by_executor(spark: Any) -> dict[str, int]:
    return {e["id"]: e["completedTasks"] for e in _executors(spark)}


def _produce(handle: Any, count: int) -> set[str]:
    from rmqk.plugins.spark.demo import produce_orders

    handle.call(handle.broker.create_topic("Orders", queues=QUEUES))
    produced = asyncio.run(produce_orders(handle.namesrv_addr, count, topic="Orders"))
    return set(produced.msg_ids)


def _worker_of(cluster: StandaloneCluster, executor_dir: str) -> int:
    """The worker whose work dir holds an executor's working directory."""
    where = Path(executor_dir).resolve()
    for w in cluster.workers:
        if where.is_relative_to(w.work_dir.resolve()):
            return w.index
    raise AssertionError(f"{executor_dir} is under no worker's work dir")


def _where_udf(markers: str, pause_s: float) -> Callable[[str], str]:
    """A UDF body returning the executor's directory; the first row of each task attempt
    leaves a marker (batch, partition, attempt, directory) and sleeps ``pause_s``.

    Nested so that Spark ships it by value: executors cannot import this test module.
    """

    def where(_msg_id: str) -> str:
        import os
        import time

        from pyspark import TaskContext

        here = os.getcwd()
        ctx = TaskContext.get()
        if ctx is None or not markers:
            return here
        batch = ctx.getLocalProperty("streaming.sql.batchId") or "-"
        name = f"b{batch}-p{ctx.partitionId()}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}"
        path = os.path.join(markers, name)
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                f.write(here)
            os.rename(path + ".tmp", path)
            time.sleep(pause_s)
        return here

    return where


def _with_where(frame: Any, markers: str = "", pause_s: float = 0.0) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    where = F.udf(_where_udf(markers, pause_s), StringType(), useArrow=False)
    return frame.withColumn("executor_dir", where("msg_id"))


def _assert_exactly_once(spark: Any, out: Path, msg_ids: set[str]) -> list[Any]:
    rows = spark.read.parquet(str(out)).collect()
    ids = [r.msg_id for r in rows]
    assert len(ids) == len(msg_ids), f"{len(ids)} rows for {len(msg_ids)} messages"
    assert set(ids) == msg_ids
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == len(msg_ids)
    return rows


# -- spark-submit, before the module's own application takes both workers' cores -----------


def _doc_submit_example() -> str:
    text = (ROOT / "docs" / "spark.md").read_text()
    blocks = re.findall(r"^```python\n(# orders_to_parquet\.py.*?)^```", text, re.M | re.S)
    assert len(blocks) == 1, "docs/spark.md lost its spark-submit example"
    return blocks[0]


def test_spark_submit_runs_the_documented_example(
    cluster: StandaloneCluster, broker_thread: Any, tmp_path: Path
) -> None:
    # Run first: the module's own application, once started, holds every core.
    assert not cluster.state()["activeapps"], "another application holds the cluster"
    sent = _produce(broker_thread, 2000)
    script, out = tmp_path / "orders_to_parquet.py", tmp_path / "orders"
    script.write_text(_doc_submit_example())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    proc = subprocess.run(
        [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            cluster.url,
            # The Python with rocketmq-kernel[spark] installed, for the driver and executors.
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "--conf",
            "spark.executor.memory=512m",
            str(script),
            broker_thread.namesrv_addr,
            str(out),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    ids = table.column("msg_id").to_pylist()
    assert len(ids) == len(sent) and set(ids) == sent
    # The application had an executor on each worker (get_session kept spark-submit's master).
    apps = {p.name for w in cluster.workers for p in w.work_dir.iterdir()}
    assert len(apps) == 1, apps
    for w in cluster.workers:
        assert [p.name for p in w.work_dir.iterdir()] == list(apps)


# -- the module's application ----------------------------------------------------------------


def test_batch_read_spreads_queues_over_both_workers(
    spark: Any, cluster: StandaloneCluster, broker_thread: Any, tmp_path: Path
) -> None:
    sent = _produce(broker_thread, 2000)
    before = _tasks_by_executor(spark)
    frame = spark.read.format("rocketmq").option("namesrv", broker_thread.namesrv_addr)
    frame = frame.option("topics", "Orders").load()
    assert frame.rdd.getNumPartitions() == QUEUES  # one partition per queue
    out = tmp_path / "out"
    _with_where(frame).write.parquet(str(out))
    rows = _assert_exactly_once(spark, out, sent)
    dirs_by_queue: dict[int, set[str]] = {}
    for r in rows:
        dirs_by_queue.setdefault(r.queue_id, set()).add(r.executor_dir)
    assert sorted(dirs_by_queue) == list(range(QUEUES))
    assert all(len(d) == 1 for d in dirs_by_queue.values()), dirs_by_queue  # a queue: one task
    workers = {_worker_of(cluster, d) for ds in dirs_by_queue.values() for d in ds}
    assert workers == {0, 1}, dirs_by_queue
    after = _tasks_by_executor(spark)
    assert all(after[e] > before.get(e, 0) for e in after), (before, after)


async def test_sink_writes_through_both_workers_exactly_once(
    spark: Any, cluster: StandaloneCluster, broker: Any, tmp_path: Path
) -> None:
    from rmqk.app.config import load_config
    from rmqk.app.runtime import ComposedConsumer
    from rmqk.plugins.spark.demo import produce_orders
    from rmqk.plugins.spark.options import SinkOptions

    await broker.create_topic("Orders", queues=QUEUES)
    produced = await produce_orders(broker.namesrv_addr, 6000, topic="Orders")
    out = tmp_path / "orders"
    sink_options: dict[str, Any] = {
        "master": cluster.url,
        "path": str(out),
        "exactly_once": True,
        "flush_rows": 2000,
        "flush_seconds": 0.5,
        # One file per flush (the default) is one task, run by whichever executor is
        # free: let Spark split each flush so that both executors write.
        "files_per_flush": 0,
    }
    if "writer" in attrs.fields_dict(SinkOptions):
        sink_options["writer"] = "spark"  # Parquet is otherwise written by pyarrow, no executor
    config = tmp_path / "c.toml"
    config.write_text(
        "\n".join(
            [
                "[consumers.orders]",
                'group = "g-spark-cluster"',
                f'namesrv_addr = "{broker.namesrv_addr}"',
                'subscription = { Orders = "*" }',
                'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"',
                "consume_message_batch_max_size = 32",
                "await_termination_millis_when_shutdown = 5000",
                'sink = "spark"',
                "[consumers.orders.sink_options]",
                *(f"{k} = {json.dumps(v)}" for k, v in sink_options.items()),
            ]
        )
        + "\n"
    )
    before = _tasks_by_executor(spark)
    composed = ComposedConsumer(load_config(config).consumers[0])
    await composed.start()
    sink: Any = composed.sink
    try:
        deadline = time.monotonic() + 300
        while sink.stats.rows_written < produced.count:
            assert time.monotonic() < deadline, f"only {sink.stats.rows_written} rows written"
            await asyncio.sleep(0.1)
    finally:
        await composed.stop()
    # The session is the module's: the sink's flushes ran as tasks of both executors.
    after = _tasks_by_executor(spark)
    assert all(after[e] > before.get(e, 0) for e in after), (before, after)
    _assert_exactly_once(spark, out, set(produced.msg_ids))


def test_stream_survives_a_worker_killed_mid_batch(
    spark: Any, cluster: StandaloneCluster, broker_thread: Any, tmp_path: Path
) -> None:
    sent = _produce(broker_thread, 2400)
    out, checkpoint, markers = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "markers"
    markers.mkdir()
    frame = (
        spark.readStream.format("rocketmq")
        .option("namesrv", broker_thread.namesrv_addr)
        .option("topics", "Orders")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", 1200)
        .load()
    )
    query = (
        _with_where(frame, str(markers), pause_s=3.0)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    victim = cluster.workers[1]
    # The second micro-batch, so that the first one's output shows both workers; before
    # PySpark 4.2 there is only one.
    prefix = "b1-" if _ADMISSION_CONTROL else "b0-"
    killed: str | None = None
    try:
        # Kill the second worker while a task of that micro-batch sleeps there.
        deadline = time.monotonic() + 300
        while killed is None:
            assert query.isActive, f"the query ended first: {query.exception()}"
            assert time.monotonic() < deadline, sorted(p.name for p in markers.iterdir())
            for marker in sorted(markers.iterdir()):
                in_batch = marker.name.startswith(prefix) and not marker.name.endswith(".tmp")
                if in_batch and _worker_of(cluster, marker.read_text()) == victim.index:
                    cluster.kill_worker(victim.index)
                    killed = marker.name
                    break
            time.sleep(0.05)
        assert query.awaitTermination(300), "the query did not finish after the kill"
        assert query.exception() is None
    finally:
        if query.isActive:
            query.stop()
    assert killed is not None
    rows = _assert_exactly_once(spark, out, sent)
    # The interrupted task ran again, on the other worker, and its rows are there once.
    batch_partition = killed.rsplit("-a", 1)[0]
    attempts = sorted(p.name for p in markers.iterdir() if p.name.startswith(batch_partition + "-"))
    assert len(attempts) >= 2, (killed, attempts)
    retried_in = {_worker_of(cluster, (markers / a).read_text()) for a in attempts[1:]}
    assert retried_in == {0}, attempts
    if _ADMISSION_CONTROL:  # rows from both workers reached the output (batch 0 ran on both)
        assert {_worker_of(cluster, r.executor_dir) for r in rows} == {0, 1}
    dead = [e for e in _executors(spark) if not e["isActive"]]
    assert len(dead) == 1, _executors(spark)

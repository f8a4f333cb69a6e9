"""While a spark sink is open the start-up heap is frozen; closing the last one unfreezes it.

Garbage made of frozen objects waits for the close and is collected then: nothing
is kept for good. A process that froze its heap itself is left as it was.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqk.plugins.sinks.heapfreeze import HeapFreeze, heap_freeze

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic GC frees it


@pytest.fixture(autouse=True)
def _no_freeze_around() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_last_release_unfreezes_and_frozen_garbage_is_collected_then() -> None:
    freeze = HeapFreeze()
    node = Node()
    dead = weakref.ref(node)
    freeze.hold()
    freeze.hold()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert dead() is not None  # frozen: no collection looks at it
    freeze.release()
    assert gc.get_freeze_count() > 0  # another holder is open
    freeze.release()
    assert gc.get_freeze_count() == 0
    # Before any collection: on 3.12 one moves immortal objects back into the
    # permanent generation (see the next tests), which no release is to blame for.
    freeze.release()  # one too many changes nothing
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert dead() is None


def test_the_heap_is_frozen_after_a_full_collection() -> None:
    # On 3.12 a full collection leaves the immortal objects it met in the permanent
    # generation: the count alone read as a freeze by the process and none was taken.
    gc.collect()
    freeze = HeapFreeze()
    node = Node()
    dead = weakref.ref(node)
    freeze.hold()
    assert freeze.frozen_by_us
    del node
    gc.collect()
    assert dead() is not None
    freeze.release()
    assert not freeze.frozen_by_us
    gc.collect()
    assert dead() is None


def test_a_freeze_count_of_immortal_objects_alone_is_no_freeze_by_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3.12's count on every version: objects in the permanent generation, the heap not."""
    real_count = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: real_count() + 375)
    freeze = HeapFreeze()
    node = Node()
    dead = weakref.ref(node)
    freeze.hold()
    assert freeze.frozen_by_us and real_count() > 0
    del node
    gc.collect()
    assert dead() is not None  # frozen indeed
    freeze.release()
    assert real_count() == 0 and not freeze.frozen_by_us


def test_a_heap_frozen_by_the_process_is_left_alone() -> None:
    freeze = HeapFreeze()
    gc.freeze()
    frozen = gc.get_freeze_count()
    freeze.hold()
    freeze.release()
    assert gc.get_freeze_count() == frozen and not freeze.frozen_by_us


def test_nothing_is_frozen_with_the_collector_disabled() -> None:
    freeze = HeapFreeze()
    gc.disable()
    try:
        freeze.hold()
        assert gc.get_freeze_count() == 0
        freeze.release()
    finally:
        gc.enable()


async def test_an_open_spark_sink_holds_the_freeze_until_closed(tmp_path: Path) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    first = SparkSink({"path": str(tmp_path / "a"), "writer": "arrow"})
    second = SparkSink({"path": str(tmp_path / "b"), "writer": "arrow"})
    await first.start()
    assert gc.get_freeze_count() > 0 and heap_freeze.frozen_by_us
    await second.start()
    await first.close()
    assert gc.get_freeze_count() > 0
    await second.close()
    assert gc.get_freeze_count() == 0 and not heap_freeze.frozen_by_us


async def test_a_sink_closed_while_starting_leaves_nothing_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() during start(): the freeze taken after the writer started would have no release."""
    import asyncio

    from rmqk.plugins.spark import sink as sink_module

    async def slow_start(self: object) -> None:
        await asyncio.sleep(0.05)

    async def no_close(self: object) -> None:
        return None

    monkeypatch.setattr(sink_module.OutputWriter, "start", slow_start)
    monkeypatch.setattr(sink_module.OutputWriter, "close", no_close)
    sink = sink_module.SparkSink({"path": str(tmp_path / "out")})
    starting = asyncio.ensure_future(sink.start())
    await asyncio.sleep(0.01)
    await sink.close()
    await starting
    await sink.close()
    assert gc.get_freeze_count() == 0
    assert not heap_freeze.frozen_by_us


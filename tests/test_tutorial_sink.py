"""docs/tutorial-sink.md's CsvSink and its registration work as written.

Both blocks are run verbatim; the sink is registered through the plugin manager,
built from a checked ``sink_options`` table by the kernel, and writes real CSV lines
for batches submitted to it. A table without ``path`` is refused before the factory.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import registries
from rmqk.spi.contracts import SinkContext

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tutorial-sink.md"


def _tutorial_plugin() -> SimpleNamespace:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    sink_block = next(b for b in blocks if "class CsvSink" in b)
    register_block = next(b for b in blocks if "rmqk_register_sinks" in b)
    namespace: dict[str, Any] = {}
    exec(compile(sink_block, str(PAGE), "exec"), namespace)
    exec(compile(register_block, str(PAGE), "exec"), namespace)
    return SimpleNamespace(rmqk_register_sinks=namespace["rmqk_register_sinks"])


def test_the_tutorial_csv_sink_writes_what_it_is_given(pm: Any, tmp_path: Path) -> None:
    pm.register(_tutorial_plugin(), name="tutorial-csv")
    out = tmp_path / "orders.csv"
    sink = registries().sinks.create("csv", SinkContext("orders", "g"), {"path": str(out)})
    queue = MessageQueue("Orders", "broker-a", 2)
    messages = [
        MessageExt(topic="Orders", body=f"m{i}".encode(), queue_id=2, queue_offset=i)
        for i in range(5)
    ]

    async def run() -> None:
        await sink.start()
        await sink.submit(queue, messages[:3])
        await sink.submit(queue, messages[3:])
        await sink.close()

    asyncio.run(run())
    assert out.read_text().splitlines() == [f"Orders,2,{i},m{i}" for i in range(5)]


def test_the_tutorial_csv_sink_refuses_a_table_without_its_path(pm: Any) -> None:
    pm.register(_tutorial_plugin(), name="tutorial-csv")
    with pytest.raises(ConfigError) as info:
        registries().sinks.create("csv", SinkContext(), {"pth": "x.csv"})
    assert [(p.table, p.key) for p in info.value.problems] == [
        ("sink_options", "pth"),
        ("sink_options", "path"),
    ]
    assert "required key is missing: the CSV file to append to" in str(info.value)

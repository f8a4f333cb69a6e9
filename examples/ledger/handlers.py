"""The python sink function of examples/orderly-python.toml.

``rmqk run examples/orderly-python.toml`` finds this module because ``rmqk``
puts the config file's folder (``examples/``) on ``sys.path``. The consumer is
orderly: each queue's batches arrive one at a time, in offset order, so the
lines of one queue are appended in the order the messages were sent.

Each message becomes one JSON line in ``out/ledger.jsonl`` (relative to the
working directory; ``RMQK_LEDGER_PATH`` names another file), written and
fsynced before the function returns. Returning acknowledges the batch; raising
would have it consumed again after ``suspend_current_queue_time_millis``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from rmqk import MessageExt
from rmqk.model import MessageQueue

__all__ = ["write_batch"]

# Batches of different queues arrive on different threads at once.
_lock = threading.Lock()


def _path() -> Path:
    return Path(os.environ.get("RMQK_LEDGER_PATH", "out/ledger.jsonl"))


def write_batch(queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
    lines = "".join(
        json.dumps(
            {
                "topic": queue.topic,
                "queue_id": queue.queue_id,
                "queue_offset": m.queue_offset,
                "msg_id": m.msg_id,
                "keys": m.keys,
                "body": m.body.decode("utf-8", "replace"),
            }
        )
        + "\n"
        for m in messages
    )
    path = _path()
    with _lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(lines)
            out.flush()
            os.fsync(out.fileno())

"""The function examples/orderly-python.toml hands each batch to.

``rmqk run examples/orderly-python.toml``, from the repository's root, imports
it as ``examples.ledger`` (the python sink imports from the current directory,
as ``python -m`` does). The orderly consume service calls it with one queue's
batch at a time, in queue order; returning acknowledges the batch, raising
retries it after ``suspend_current_queue_time_millis``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from rmqk import MessageExt, MessageQueue

LEDGER = Path("out/ledger.jsonl")
# Batches of different queues arrive on different threads; one line each, whole.
_lock = threading.Lock()


def write_batch(queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
    lines = "".join(
        json.dumps(
            {
                "queue": f"{queue.broker_name}:{queue.queue_id}",
                "offset": m.queue_offset,
                "body": m.body.decode("utf-8", "replace"),
            }
        )
        + "\n"
        for m in messages
    )
    with _lock:
        LEDGER.parent.mkdir(parents=True, exist_ok=True)
        with LEDGER.open("a", encoding="utf-8") as f:
            f.write(lines)

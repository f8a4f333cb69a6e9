from collections import deque
from collections.abc import Iterable

from rmqk.model.message import MessageExt

def put_ascending(
    msgs: dict[int, MessageExt], order: deque[int], batch: list[MessageExt], held: int
) -> tuple[int, int] | None: ...
def remove_acked(
    msgs: dict[int, MessageExt], started: dict[int, int], batch: Iterable[MessageExt]
) -> tuple[int, int]: ...
def first_key(order: deque[int], msgs: dict[int, MessageExt]) -> int | None: ...

from collections.abc import Callable

from rmqk.model.message import MessageExt

def configure(
    ext_type: type[MessageExt],
    slot_descriptors: tuple[object, ...],
    host_texts: dict[bytes, str],
    host_text: Callable[[bytes], str],
    inflate: Callable[[bytes, int, int], bytes],
) -> None: ...
def decode_records(
    buf: bytes,
    off: int,
    end: int,
    broker_name: str,
    decompress: bool,
    max_body: int,
    out: list[MessageExt],
) -> int: ...

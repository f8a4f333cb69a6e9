def json_header(
    code: int,
    ext_fields: dict[str, str],
    flag: int,
    language: str,
    opaque: int,
    remark: str | None,
    version: int,
) -> bytes | None: ...
def decode_json_header(
    header: bytes,
) -> tuple[int, dict[str, str], int, str | int | None, int, str | None, int] | None: ...

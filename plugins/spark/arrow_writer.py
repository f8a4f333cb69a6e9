"""The ``spark`` sink's files written by pyarrow: Spark's layout, without Spark's JVM.

A flush's Arrow batch becomes one Parquet file per Hive-style partition
(``tags=paid/part-00007-<writer>.snappy.parquet``), laid out as Spark's own
``partitionBy`` writer lays it out, so Spark (or anything reading Hive
partitions) reads the output back with the schema and rows the Spark writer
would have produced: partition values escaped as Spark escapes them, empty
and null values in ``__HIVE_DEFAULT_PARTITION__``, the partition columns left
out of the files, timestamps as UTC microseconds.

Landing raw rows needs no JVM: pyarrow writes 10-20 times faster than a Spark
job per flush, and releases the GIL while it does. Spark is started only for
what pyarrow would read differently from it: a JSON ``body_schema`` beyond flat
primitive fields, or a flush whose bodies pyarrow rejects (Spark's
``from_json`` then parses that flush, and what it cannot parse is kept raw in
the corrupt-record column: :mod:`rmqk.plugins.sinks.badbody`).
"""

from __future__ import annotations

import array
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rmqk.plugins.spark.columns import COLUMN_NAMES

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from rmqk.plugins.spark.options import SinkOptions

__all__ = [
    "HIVE_DEFAULT_PARTITION",
    "ArrowFileWriter",
    "arrow_partition_problem",
    "decode_json_bodies",
    "escape_partition_value",
    "flat_json_schema",
]

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# The characters Spark's ExternalCatalogUtils escapes in a partition directory name
# (as %XX, upper-case hex): control characters and those with a meaning in paths/URIs.
_ESCAPED = frozenset(
    [chr(c) for c in range(0x01, 0x20)]
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)

# Spark DDL primitive types pyarrow's JSON reader parses exactly as from_json does.
_FLAT_TYPES: dict[str, str] = {
    "STRING": "string",
    "INT": "int32",
    "INTEGER": "int32",
    "BIGINT": "int64",
    "LONG": "int64",
    "SMALLINT": "int16",
    "SHORT": "int16",
    "TINYINT": "int8",
    "BYTE": "int8",
    "DOUBLE": "float64",
    "FLOAT": "float32",
    "REAL": "float32",
    "BOOLEAN": "bool",
}
_FIELD = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s*:?\s+([A-Za-z]+)\s*$")

# Message columns by their Arrow type family: which the Arrow writer can name a folder by.
_PARTITIONABLE_MESSAGE_COLUMNS = frozenset(
    {"topic", "broker", "queue_id", "queue_offset", "msg_id", "keys", "tags", "reconsume_times"}
)
_PARTITIONABLE_JSON_TYPES = frozenset(
    {"STRING", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT", "TINYINT", "BYTE",
     "BOOLEAN"}
)  # fmt: skip


@attrs.frozen
class _Scalars:
    newline: pa.Scalar[Any]
    empty_string: pa.Scalar[Any]
    null_string: pa.Scalar[Any]


@functools.cache
def _scalars() -> _Scalars:
    """Arrow scalars made once: pyarrow makes one of a Python value on each call, and
    tries to import dateutil (absent, so never cached) each time it does."""
    import pyarrow as pa

    return _Scalars(
        pa.scalar(b"\n", pa.binary()), pa.scalar("", pa.string()), pa.scalar(None, pa.string())
    )


def flat_json_type_names(ddl: str) -> dict[str, str] | None:
    """Field name to upper-case DDL type of a flat primitive DDL; None for anything else."""
    out: dict[str, str] = {}
    for part in ddl.split(","):
        match = _FIELD.match(part)
        if match is None or match.group(2).upper() not in _FLAT_TYPES:
            return None
        out[match.group(1)] = match.group(2).upper()
    return out or None


def flat_json_schema(ddl: str) -> pa.Schema | None:
    """The Arrow schema of a flat primitive JSON ``body_schema``; None when Spark must parse."""
    import pyarrow as pa

    names = flat_json_type_names(ddl)
    if names is None:
        return None
    return pa.schema([pa.field(n, getattr(pa, _FLAT_TYPES[t])()) for n, t in names.items()])


def arrow_partition_problem(options: SinkOptions) -> str | None:
    """Why the Arrow writer cannot lay out these partition columns as Spark would, if so.

    Folder names of strings, integers and booleans are the same text in Spark and
    here; timestamps and floating point are formatted by Spark's own rules.
    """
    json_types = flat_json_type_names(options.body_schema or "") or {}
    for name in options.partition_by:
        if name in _PARTITIONABLE_MESSAGE_COLUMNS:
            continue
        if name not in COLUMN_NAMES and json_types.get(name) in _PARTITIONABLE_JSON_TYPES:
            continue
        return f"partition column {name!r} is not a string, integer or boolean column"
    return None


def escape_partition_value(text: str) -> str:
    """``text`` as a partition folder name part, escaped as Spark escapes it."""
    if not any(ch in _ESCAPED for ch in text):
        return text
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in text)


def _folder(value: object) -> str:
    if value is None or value == "":
        return HIVE_DEFAULT_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape_partition_value(str(value))


def decode_json_bodies(
    batch: pa.RecordBatch, schema: pa.Schema, corrupt_record_column: str | None = None
) -> pa.Table | None:
    """``batch`` with the body replaced by the JSON fields; None if any body needs Spark.

    A body pyarrow rejects (not an object, a value of another type, a line break
    inside) sends the whole flush to Spark's ``from_json``, which decides what
    does not parse (the sink keeps those bodies raw: ``FrameWriter.frame``).
    Every body of a table returned here parsed: its ``corrupt_record_column``,
    when named, is all null. Arrow kernels only: no Python per row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    bodies = batch.column("body")
    if bodies.null_count or len(bodies) == 0:
        return None
    # One list of every body, made from its buffers: from_arrays (and pa.array for the
    # offsets) would be pyarrow calls that each give the GIL up.
    offsets = pa.py_buffer(array.array("i", (0, len(bodies))))
    lines = pa.Array.from_buffers(pa.list_(bodies.type), 1, [None, offsets], children=[bodies])
    joined = pc.binary_join(lines, _scalars().newline)[0].as_buffer()
    # A line break inside a body: the join adds exactly len - 1 of them. One scan of
    # the joined bytes (memchr speed) instead of a substring search per body.
    text = joined.to_pybytes()
    if text.count(b"\n") != len(bodies) - 1 or b"\r" in text:
        return None
    try:
        parsed = pj.read_json(
            pa.BufferReader(joined),
            read_options=pj.ReadOptions(block_size=max(1 << 20, joined.size + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if parsed.num_rows != batch.num_rows:
        return None
    names = [n for n in batch.schema.names if n != "body"]
    columns = [batch.column(n) for n in names]
    extra_names: list[str] = []
    extra: list[pa.Array] = []
    if corrupt_record_column is not None:
        extra_names.append(corrupt_record_column)
        extra.append(pa.nulls(batch.num_rows, pa.string()))
    return pa.Table.from_arrays(
        columns + [_one_chunk(c) for c in parsed.columns] + extra,
        names=names + parsed.column_names + extra_names,
    )


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array; a concatenation only if it has several chunks.

    Every pyarrow call gives the GIL up, and the writer thread waits for it
    back while the event loop holds it: a flush's column of one chunk (one JSON
    block) costs no call.
    """
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()


class ArrowFileWriter:
    """Writes a flush's rows as Parquet files with pyarrow, one per partition.

    ``spark_rows`` turns a batch into rows through Spark (the body decoding
    pyarrow cannot do as Spark would); it is called only for such flushes.
    """

    def __init__(
        self,
        options: SinkOptions,
        owner: str,
        spark_rows: Callable[[pa.RecordBatch], pa.Table],
    ) -> None:
        self.options = options
        self.owner = owner
        self._spark_rows = spark_rows
        self._json = (
            flat_json_schema(options.body_schema)
            if options.body_format == "json" and options.body_schema
            else None
        )
        self.spark_flushes = 0

    def rows(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """The rows of the output: the message columns, the body as ``body_format`` says.

        A table (binary bodies only: see :meth:`takes_parts`) is written as it is.
        """
        import pyarrow as pa

        opts = self.options
        if isinstance(batch, pa.Table):
            return batch
        if opts.body_format == "binary":
            return pa.Table.from_batches([batch])
        if opts.body_format == "text":
            # Spark's cast keeps the bytes as they are, valid UTF-8 or not; so does a view.
            index = batch.schema.get_field_index("body")
            body = batch.column(index).view(pa.string())
            return pa.Table.from_batches([batch.set_column(index, "body", body)])
        if self._json is not None:
            decoded = decode_json_bodies(batch, self._json, opts.corrupt_record_column)
            if decoded is not None:
                return decoded
        self.spark_flushes += 1
        return self._spark_rows(batch)

    @property
    def takes_parts(self) -> bool:
        """Whether :meth:`write` takes a flush's parts as one table of many chunks.

        Binary bodies are written as they are, so the parts need no copy into one
        batch (about 40 ms of the writer thread per 100,000 rows).
        """
        return self.options.body_format == "binary"

    def write(
        self, batch: pa.RecordBatch | pa.Table, directory: Path, seq: int, temporary: bool
    ) -> list[str]:
        """Write the batch's rows under ``directory``; the files, relative to it.

        ``temporary``: each file is written under a hidden name (which readers
        skip) and renamed into place when complete, so a reader never sees half
        a file. Without it the caller publishes the directory itself (a new
        one, whose folders do not exist yet).
        """
        table = self.rows(batch)
        name = f"part-{seq:05d}-{self.owner}.snappy.parquet"
        written: list[str] = []
        for folder, part in self._partitions(table):
            rel = os.path.join(folder, name) if folder else name
            self._write_file(part, directory / rel, temporary)
            written.append(rel)
        return written

    def _partitions(self, table: pa.Table) -> list[tuple[str, pa.Table]]:
        """(folder, rows without the partition columns) per partition, rows in order.

        Each key's distinct values are found once (a dictionary encoding) and
        their folder names made in Python, a few per flush; the rows are then
        grouped by one stable sort of a combined code and sliced: no Python per
        row, and a handful of pyarrow calls per flush (each one gives the GIL up
        and waits to get it back from a busy event loop).
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = list(self.options.partition_by)
        if not keys:
            return [("", table)]
        if table.num_rows == 0:
            return []
        codes: pa.Array | None = None
        # Per key, the folder part of each of its groups, in the order first seen.
        groups: list[list[str]] = []
        for k in keys:
            encoded = pc.dictionary_encode(_one_chunk(table[k]), null_encoding="encode")
            # "" and null share Spark's default partition: one group, one file.
            parts: list[str] = []
            remap: list[int] = []
            for value in encoded.dictionary.to_pylist():
                part = f"{escape_partition_value(k)}={_folder(value)}"
                if part not in parts:
                    parts.append(part)
                remap.append(parts.index(part))
            groups.append(parts)
            index = (
                encoded.indices
                if len(remap) == len(parts)
                else pa.array(remap, pa.int32()).take(encoded.indices)
            )
            if codes is None:
                codes = index.cast(pa.int64()) if len(keys) > 1 else index
            else:
                codes = pc.add(pc.multiply(codes, len(parts)), index)
        assert codes is not None
        if all(len(g) == 1 for g in groups):
            return [(os.path.join(*(g[0] for g in groups)), table.drop_columns(keys))]
        counts = pc.value_counts(codes)
        sizes = sorted(zip(counts.field(0).to_pylist(), counts.field(1).to_pylist(), strict=True))
        # Stable: each partition's rows keep their order.
        rows = table.take(pc.sort_indices(codes)).drop_columns(keys)
        out: list[tuple[str, pa.Table]] = []
        start = 0
        for code, size in sizes:
            names: list[str] = []
            for parts in reversed(groups):
                code, i = divmod(code, len(parts))
                names.append(parts[i])
            out.append((os.path.join(*reversed(names)), rows.slice(start, size)))
            start += size
        return out

    def _write_file(self, table: pa.Table, path: Path, temporary: bool) -> None:
        """One Parquet file; ``temporary``: under a hidden name, renamed when complete.

        The file is opened here, not by ``write_table`` (which looks the path up
        as a local file and as a URI first; ``pyarrow.OSFile`` checks it is no
        folder): each of those is a call that gives the GIL up. Without
        ``temporary`` the folder is new.
        """
        import pyarrow.parquet as pq

        target = path.with_name(f".{path.name}.tmp") if temporary else path
        if not temporary:
            path.parent.mkdir(parents=True, exist_ok=True)
        files = _local_files()
        try:
            try:
                sink = files.open_output_stream(str(target), compression=None)
            except FileNotFoundError:
                # A partition folder this output does not have yet.
                path.parent.mkdir(parents=True, exist_ok=True)
                sink = files.open_output_stream(str(target), compression=None)
            try:
                pq.write_table(table, sink, compression="snappy")
            finally:
                sink.close()
            if temporary:
                os.replace(target, path)
        except BaseException:
            target.unlink(missing_ok=True)
            raise


@functools.cache
def _local_files() -> pafs.LocalFileSystem:
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem()

"""Turning a flush's Arrow batch into a DataFrame and writing it (blocking Spark calls).

Everything here blocks for as long as Spark works: the sink calls it from a
worker thread, never from the event loop.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.plugins.spark.options import SinkOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FrameWriter"]

log = logging.getLogger("rmqk.plugins.spark.frames")

_JSON_COLUMN = "_rmqk_json_body"
_TEXT_COLUMN = "_rmqk_text_body"
_BAD_COLUMN = "_rmqk_bad_body"
# from_json's own corrupt-record field; only whether it is set is used (see _parsed).
_CORRUPT_COLUMN = "_rmqk_corrupt_record"


class FrameWriter:
    """Writes Arrow batches of message rows to the sink's output with one Spark job each."""

    def __init__(self, options: SinkOptions, session: Any) -> None:
        self.options = options
        self.session = session
        self._table_ready = False
        self._table_adopted = False
        # The table's columns once a flush's saveAsTable made or checked it: later ones
        # insert into it (_insert).
        self._table_columns: list[str] | None = None
        # The JSON body's Arrow schema when pyarrow can parse it exactly as Spark would.
        self._json_arrow: Any = None

    def check(self) -> None:
        """Problems only Spark can find (the JSON body schema), as a ConfigError."""
        opts = self.options
        if opts.body_format != "json" or opts.body_schema is None:
            return
        try:
            from pyspark.sql.types import StructType

            schema = StructType.fromDDL(opts.body_schema)
        except Exception as exc:
            raise ConfigError(
                [
                    ConfigProblem(
                        "<sink_options>",
                        "spark",
                        "body_schema",
                        f"not a valid Spark DDL schema ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})",
                    )
                ]
            ) from None
        log.debug("JSON body schema: %s", schema.simpleString())
        self._json_arrow = _fast_json_schema(schema)

    def frame(self, batch: pa.RecordBatch | pa.Table) -> Any:
        """The DataFrame of a flush: its rows as ``body_format`` says.

        A table is rows already decoded (:meth:`json_rows`), taken as they are.
        """
        import pyarrow as pa
        from pyspark.sql import functions as F

        opts = self.options
        if isinstance(batch, pa.Table):
            return self._coalesced(self.session.createDataFrame(batch))
        if opts.body_format == "json" and self._json_arrow is not None:
            decoded = _decode_json_bodies(batch, self._json_arrow, opts.corrupt_record_column)
            if decoded is not None:
                return self._coalesced(self.session.createDataFrame(decoded))
        df = self.session.createDataFrame(pa.Table.from_batches([batch]))
        if opts.body_format == "text":
            df = df.withColumn("body", F.col("body").cast("string"))
        elif opts.body_format == "json":
            df = self._parsed(df)
        return self._coalesced(df)

    def _parsed(self, df: Any) -> Any:
        """``from_json`` of the bodies; a body it cannot parse kept raw, its fields null.

        Not parsed: what ``from_json`` (PERMISSIVE) reports as a corrupt record
        (not JSON, not an object, a value that does not fit its field's type), and
        a body it returns no row for (an empty one). Spark keeps the fields of a
        partly matching object; here none are kept, so a row holds either its
        fields or its raw body. The raw body is the bytes as they came (the same
        cast as body_format = 'text'), not Spark's UTF-8-repaired copy.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructType

        opts = self.options
        assert opts.body_schema is not None
        body = StructType.fromDDL(opts.body_schema)
        assert isinstance(body, StructType)
        fields = body.fields
        schema = StructType([*fields]).add(_CORRUPT_COLUMN, StringType())
        text = F.col("body").cast("string")
        parsed = F.from_json(text, schema, {"columnNameOfCorruptRecord": _CORRUPT_COLUMN})
        keep = [c for c in df.columns if c != "body"]
        staged = df.select(*keep, parsed.alias(_JSON_COLUMN), text.alias(_TEXT_COLUMN))
        bad = F.col(_JSON_COLUMN).isNull() | F.col(f"{_JSON_COLUMN}.{_CORRUPT_COLUMN}").isNotNull()
        staged = staged.select(*keep, _JSON_COLUMN, _TEXT_COLUMN, bad.alias(_BAD_COLUMN))
        return staged.select(
            *keep,
            *[
                F.when(~F.col(_BAD_COLUMN), F.col(f"{_JSON_COLUMN}.`{f.name}`")).alias(f.name)
                for f in fields
            ],
            F.when(F.col(_BAD_COLUMN), F.col(_TEXT_COLUMN)).alias(opts.corrupt_record_column),
        )

    def _coalesced(self, df: Any) -> Any:
        if self.options.files_per_flush > 0:
            df = df.coalesce(self.options.files_per_flush)
        return df

    def json_rows(self, batch: pa.RecordBatch) -> pa.Table:
        """The decoded rows of a JSON flush as Arrow, to count and check before writing.

        pyarrow's when it parses every body; else Spark's, brought back as Arrow
        (one more job per such flush) so the bad bodies are known before the write.
        """
        opts = self.options
        if self._json_arrow is not None:
            decoded = _decode_json_bodies(batch, self._json_arrow, opts.corrupt_record_column)
            if decoded is not None:
                return decoded
        table: pa.Table = self.frame(batch).toArrow()
        return table

    def write(self, batch: pa.RecordBatch | pa.Table, staging_dir: str | None = None) -> None:
        """Append ``batch`` to the output, or write it to ``staging_dir`` (exactly-once)."""
        opts = self.options
        began = time.perf_counter()
        df = self.frame(batch)
        framed = time.perf_counter()
        if staging_dir is None and self._table_columns is not None and self._insert(df):
            log.debug(
                "spark insert of %d rows: frame %.3fs, write %.3fs",
                batch.num_rows,
                framed - began,
                time.perf_counter() - framed,
            )
            return
        writer = df.write.format(opts.format)
        if opts.partition_by:
            writer = writer.partitionBy(*opts.partition_by)
        if staging_dir is not None:
            writer.mode("errorifexists").save(staging_dir)
        elif opts.table:
            if opts.path:
                writer = writer.option("path", opts.path)
            else:
                self._adopt_earlier_table()
            writer.mode("append").saveAsTable(opts.table)
            # saveAsTable has created the table or checked it against the frame (format,
            # partitioning, columns): later flushes insert into it (see _insert).
            # The flush is written by now: a failed lookup only leaves the next flush
            # to saveAsTable again, it must not fail (and redeliver) this one.
            try:
                self._table_columns = list(self.session.table(opts.table).columns)
            except Exception as exc:
                log.info("spark sink: columns of %s not read (%s)", opts.table, exc)
                self._table_columns = None
        else:
            assert opts.path is not None
            writer.mode("append").save(opts.path)
        log.debug(
            "spark write of %d rows: frame %.3fs, write %.3fs",
            batch.num_rows,
            framed - began,
            time.perf_counter() - framed,
        )

    def _insert(self, df: Any) -> bool:
        """Append to the table an earlier flush's ``saveAsTable`` created or checked.

        ``insertInto`` skips what ``saveAsTable`` repeats on every append (the
        checks of a CREATE TABLE AS SELECT in append mode, and resolving the
        table's files again once written). Warm, alternated, same session:
        2,000-row flushes 0.245 vs 0.314 s (median of 30), JVM CPU 0.18 vs
        0.21 s; at 100,000 rows the difference is within the noise. It matches
        columns by position, so the frame is put in the table's column order.

        False if Spark refused the insert (the table was dropped or changed
        meanwhile): then ``saveAsTable`` writes the flush, creating or checking
        the table again. Spark refuses most such inserts while analysing them,
        before any file is written; one refused after its files were written
        (a partition another writer registered first, the table dropped
        mid-write) lands twice, as any retried flush of this at-least-once
        output may.
        """
        from pyspark.errors import AnalysisException

        assert self._table_columns is not None
        try:
            df.select(*self._table_columns).write.insertInto(str(self.options.table))
        except AnalysisException as exc:
            log.info("spark sink: insert into %s refused (%s)", self.options.table, exc)
            self._table_columns = None
            return False
        except BaseException:
            self._table_columns = None
            raise
        return True

    def _adopt_earlier_table(self) -> None:
        """Register the files an earlier run wrote for ``table`` before appending to it.

        Spark's catalog (in memory without Hive) forgets a managed table when the
        session ends, and then refuses to create it over its non-empty warehouse
        folder (LOCATION_ALREADY_EXISTS): a restarted consumer could write nothing.
        """
        if self._table_adopted:
            return
        self._table_adopted = True
        table = str(self.options.table)
        catalog = self.session.catalog
        warehouse = urlparse(str(self.session.conf.get("spark.sql.warehouse.dir")))
        if "." in table or warehouse.scheme not in ("", "file") or catalog.tableExists(table):
            return
        location = Path(warehouse.path) / table
        if location.is_dir() and any(location.iterdir()):
            catalog.createTable(table, path=str(location), source=self.options.format)

    def after_publish(self) -> None:
        """With table and exactly-once: the table over path exists and sees the new files."""
        opts = self.options
        if not opts.table or not opts.path:
            return
        catalog = self.session.catalog
        if not self._table_ready and not catalog.tableExists(opts.table):
            catalog.createTable(opts.table, path=opts.path, source=opts.format)
        self._table_ready = True
        if opts.partition_by:
            self.session.sql(f"ALTER TABLE {opts.table} RECOVER PARTITIONS")
        catalog.refreshTable(opts.table)


_FAST_JSON_TYPES = ("string", "int", "bigint", "smallint", "tinyint", "double", "float", "boolean")


def _fast_json_schema(schema: Any) -> Any:
    """The Arrow schema for pyarrow's JSON reader, or None when Spark must parse.

    pyarrow parses flat objects of these primitive types 30-50 times faster than
    ``from_json``; anything it would read differently from Spark (timestamps,
    decimals, nesting) goes through Spark.
    """
    if any(field.dataType.simpleString() not in _FAST_JSON_TYPES for field in schema.fields):
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


def _decode_json_bodies(
    batch: pa.RecordBatch, schema: Any, corrupt_record_column: str | None = None
) -> pa.Table | None:
    """``batch`` with the body replaced by the JSON fields; None if any body needs Spark."""
    from rmqk.plugins.spark.arrow_writer import decode_json_bodies

    return decode_json_bodies(batch, schema, corrupt_record_column)

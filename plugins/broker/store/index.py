"""The message index: messages by key and by ``UNIQ_KEY`` (Apache's IndexService).

Every record the store appends is dispatched here: its ``UNIQ_KEY`` and each of
its ``KEYS`` (split by spaces) are added as ``<topic>#<key>`` with the record's
commit log offset and store time, in index files of ``index_file.py`` layout
under ``<store>/index/``. A message of a rolled-back transaction is not indexed;
a prepared (half) one is, under the topic it is stored in (as Apache, whose half
messages are stored in ``RMQ_SYS_TRANS_HALF_TOPIC``, not in their real topic).
A query walks the files newest first, as IndexService.queryOffset.

The index is derived data. What a flush vouched for is recorded in
``index/checkpoint.json`` (the last file, its entry count, and the commit log
offset dispatched up to); on open a file is kept only when it matches that
record, and everything after is rebuilt from the commit log. So after any exit,
a ``kill -9`` or a torn commit log tail included, lookups answer for every
record the commit log kept, whether or not its index entries were flushed.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import attrs

from rmqk.model.message import MessageProperty, parse_properties

from .files import fsync_dir, replace_file
from .index_file import IndexFile, IndexHeader
from .records import RecordInfo, inspect_record

__all__ = ["IndexConfig", "IndexService", "QueryMessageResult", "QueryOffsetResult"]

log = logging.getLogger("rmqk.broker.store.index")

_TRANSACTION_MASK = 0xC
_TRANSACTION_ROLLBACK = 0xC
_CHECKPOINT = "checkpoint.json"

# walk(start, stop, on_record): on_record(offset, record) for every valid record in [start, stop).
Walk = Callable[[int, int, Callable[[int, RecordInfo], None]], object]


@attrs.frozen
class IndexConfig:
    """MessageStoreConfig's index settings.

    Apache's defaults are 5,000,000 hash slots and 20,000,000 entries per file
    (a 420 MB file); the embedded broker keeps a tenth of each (42 MB, sparse)
    unless told otherwise. Lookups work the same at any size: fewer slots only
    make chains longer.
    """

    enabled: bool = True  # messageIndexEnable
    max_hash_slot_num: int = 500_000
    max_index_num: int = 2_000_000
    max_msgs_num_batch: int = 64  # the most offsets one query returns
    default_query_max_num: int = 32  # maxNum of a unique-key query

    def __attrs_post_init__(self) -> None:
        for name in ("max_hash_slot_num", "max_index_num", "max_msgs_num_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_index_num < 2:
            raise ValueError("max_index_num must be at least 2 (entry 0 is never used)")


@attrs.frozen
class QueryOffsetResult:
    phy_offsets: tuple[int, ...]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@attrs.frozen
class QueryMessageResult:
    """What QUERY_MESSAGE answers: whole stored records, in commit log order."""

    records: tuple[bytes, ...]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int

    @property
    def body(self) -> bytes:
        return b"".join(self.records)


def keys_of(properties_raw: str) -> list[str]:
    """The index keys of a message: its UNIQ_KEY, then each of its KEYS."""
    if "KEY" not in properties_raw:
        return []
    props = parse_properties(properties_raw)
    found: list[str] = []
    uniq = props.get(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq is not None:
        found.append(uniq)
    keys = props.get(MessageProperty.KEYS)
    if keys:
        found.extend(k for k in keys.split(MessageProperty.KEY_SEPARATOR) if k)
    return found


@attrs.frozen
class _Checkpoint:
    file: str
    index_count: int
    indexed_to: int


def _read_checkpoint(path: Path) -> _Checkpoint | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return _Checkpoint(str(data["file"]), int(data["indexCount"]), int(data["indexedTo"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable index checkpoint %s (%s)", path, exc)
        return None


class IndexService:
    """The index files of one store; thread-safe (one lock, held briefly)."""

    def __init__(self, directory: Path, config: IndexConfig | None = None) -> None:
        self.directory = directory
        self.config = config or IndexConfig()
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._dirty: set[IndexFile] = set()
        self._indexed_to = 0  # commit log offset up to which every record was dispatched
        self._checkpointed: _Checkpoint | None = None
        self._failed = False  # a write failed: stop, and let the next open rebuild
        self.reindexed = 0  # records the last open indexed again from the commit log

    # ------------------------------------------------------------------ opening

    def open(self, log_min: int, log_end: int, walk: Walk) -> int:
        """Load the files a flush vouched for and index the rest of the commit log.

        ``log_min`` and ``log_end`` bound the commit log as recovery left it.
        Returns how many records were indexed again.
        """
        if not self.config.enabled:
            return 0
        self.directory.mkdir(parents=True, exist_ok=True)
        checkpoint = _read_checkpoint(self.directory / _CHECKPOINT)
        kept, resume = self._load(checkpoint, log_end)
        self._files = kept
        self._indexed_to = max(min(resume, log_end), log_min)
        count = 0

        def on_record(offset: int, info: RecordInfo) -> None:
            nonlocal count
            count += 1
            props = info.properties_raw
            self._index(offset, info.topic, info.sys_flag, info.store_timestamp, props)

        if self._indexed_to < log_end:
            walk(self._indexed_to, log_end, on_record)
            self._indexed_to = log_end
            self.reindexed = count
            if self._failed:
                log.error("message index: rebuilding failed; lookups miss what was not indexed")
            log.info(
                "message index: %d record(s) from commit log offset %d indexed again",
                count,
                resume,
            )
        self.flush(force=True)
        return count

    def _load(self, checkpoint: _Checkpoint | None, log_end: int) -> tuple[list[IndexFile], int]:
        """The files to keep and the commit log offset to index again from."""
        cfg = self.config
        names = sorted(p.name for p in self.directory.iterdir() if p.name[:1].isdigit())
        kept: list[IndexFile] = []
        resume = 0
        why = ""
        if checkpoint is None:
            why = "no index checkpoint"
        elif not checkpoint.file:
            # No file existed at the last flush: the records before it have no keys.
            resume = checkpoint.indexed_to
            why = "index files were written after the last index flush"
        elif checkpoint.file not in names:
            why = f"the index file {checkpoint.file} of the last index flush is missing"
        for name in names:
            path = self.directory / name
            if not why:
                try:
                    f = IndexFile(path, cfg.max_hash_slot_num, cfg.max_index_num, create=False)
                except (OSError, ValueError) as exc:
                    why = f"index file {name} is unusable ({exc})"
                else:
                    why = self._distrust(f, checkpoint, log_end)
                    if why:
                        f.close()
                    else:
                        kept.append(f)
                        assert checkpoint is not None
                        if name == checkpoint.file:
                            resume = checkpoint.indexed_to
                        else:
                            # Its last record may continue in a file not kept: index it again.
                            resume = f.header.end_phy_offset
                        continue
            log.warning("message index: %s; rebuilding %s from the commit log", why, name)
            path.unlink()
        if len(kept) < len(names):
            fsync_dir(self.directory)
        return kept, resume

    @staticmethod
    def _distrust(f: IndexFile, checkpoint: _Checkpoint | None, log_end: int) -> str:
        """Why ``f`` cannot be kept ("" when it can)."""
        assert checkpoint is not None
        if f.name > checkpoint.file:
            return f"index file {f.name} was written after the last index flush"
        if f.header.index_count > 1 and f.header.end_phy_offset >= log_end:
            return f"index file {f.name} indexes records past the commit log's end {log_end}"
        if f.name == checkpoint.file and (
            f.header.index_count != checkpoint.index_count or not f.slots_below_count()
        ):
            return f"index file {f.name} changed after the last index flush"
        return ""

    # ------------------------------------------------------------------ writing

    def dispatch(self, offset: int, buf: bytes | bytearray) -> None:
        """Index the records just appended at commit log ``offset``.

        Java's CommitLogDispatcherBuildIndex, called by the writer under its lock,
        so entries follow the commit log's order.
        """
        if not self.config.enabled or self._failed:
            return
        pos = 0
        size = len(buf)
        while pos < size:
            info = inspect_record(buf, pos, size, offset + pos, check_crc=False)
            if info is None:
                log.error("message index: no record at commit log offset %d", offset + pos)
                break
            props = info.properties_raw
            self._index(offset + pos, info.topic, info.sys_flag, info.store_timestamp, props)
            pos += info.size
        with self._lock:
            self._indexed_to = max(self._indexed_to, offset + pos)

    def _index(self, offset: int, topic: str, sys_flag: int, store_ts: int, props: str) -> None:
        if sys_flag & _TRANSACTION_MASK == _TRANSACTION_ROLLBACK:
            return
        keys = keys_of(props)
        if not keys:
            return
        with self._lock:
            if self._failed:
                return
            try:
                for key in keys:
                    self._put(f"{topic}#{key}", offset, store_ts)
            except OSError as exc:
                self._failed = True
                log.error(
                    "message index: writing failed (%s); messages are not indexed until the "
                    "store is reopened, which rebuilds the index from the commit log",
                    exc,
                )

    def _put(self, key: str, offset: int, store_ts: int) -> None:
        f = self._files[-1] if self._files else None
        if f is None or f.full:
            f = self._new_file(f)
        if not f.put_key(key, offset, store_ts):
            raise OSError(f"index file {f.name} refused an entry")
        self._dirty.add(f)

    def _new_file(self, previous: IndexFile | None) -> IndexFile:
        name = datetime.datetime.now().strftime("%Y%m%d%H%M%S%f")[:-3]
        while any(f.name >= name for f in self._files) or (self.directory / name).exists():
            # Names sort as the files were made, even when the clock steps back.
            name = str(int(name) + 1)
        h = previous.header if previous is not None else IndexHeader()
        f = IndexFile(
            self.directory / name,
            self.config.max_hash_slot_num,
            self.config.max_index_num,
            create=True,
            end_phy_offset=h.end_phy_offset,
            end_timestamp=h.end_timestamp,
        )
        self._files.append(f)
        self._dirty.add(f)
        fsync_dir(self.directory)
        return f

    def flush(self, *, force: bool = False) -> None:
        """fsync what changed, then record it in the checkpoint."""
        if not self.config.enabled:
            return
        with self._lock:
            if self._failed:
                return
            dirty = [(f, f.header.pack()) for f in self._files if f in self._dirty]
            self._dirty.clear()
            last = self._files[-1] if self._files else None
            checkpoint = _Checkpoint(
                last.name if last else "", last.header.index_count if last else 1, self._indexed_to
            )
        # Outside the lock: puts go on meanwhile; each header is the state captured above.
        for f, header in dirty:
            f.sync(header)
        if force or checkpoint != self._checkpointed:
            data = {
                "file": checkpoint.file,
                "indexCount": checkpoint.index_count,
                "indexedTo": checkpoint.indexed_to,
            }
            replace_file(self.directory / _CHECKPOINT, json.dumps(data).encode("utf-8"))
            self._checkpointed = checkpoint

    def delete_expired(self, commit_log_min_offset: int) -> int:
        """Delete files whose every entry precedes the commit log (never the last file)."""
        with self._lock:
            doomed = []
            for f in self._files[:-1]:
                if f.header.end_phy_offset >= commit_log_min_offset:
                    break
                doomed.append(f)
            for f in doomed:
                self._files.remove(f)
                self._dirty.discard(f)
                f.destroy()
        if doomed:
            fsync_dir(self.directory)
        return len(doomed)

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files.clear()
            self._dirty.clear()

    # ------------------------------------------------------------------ reading

    def query_offsets(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryOffsetResult:
        """Commit log offsets of entries of ``topic#key`` stored in [begin, end] (queryOffset)."""
        found: list[int] = []
        last_ts = last_phy = 0
        max_num = min(max_num, self.config.max_msgs_num_batch)
        full_key = f"{topic}#{key}"
        with self._lock:
            files = self._files
            for i in range(len(files) - 1, -1, -1):
                f = files[i]
                if i == len(files) - 1:
                    last_ts, last_phy = f.header.end_timestamp, f.header.end_phy_offset
                if f.time_matched(begin, end):
                    f.select(found, full_key, max_num, begin, end)
                if f.header.begin_timestamp < begin or len(found) >= max_num:
                    break
        # A record re-indexed on open may have entries in two files: list it once.
        return QueryOffsetResult(tuple(dict.fromkeys(found)), last_ts, last_phy)

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin: int,
        end: int,
        read: Callable[[int], bytes | None],
        store_timestamp: Callable[[bytes], int],
    ) -> QueryMessageResult:
        """The records of ``topic#key`` (DefaultMessageStore.queryMessage).

        As Java, when every offset found names a record that is gone, the query is
        tried again (three times at most) below the time of the first one.
        """
        records: list[bytes] = []
        last_ts = last_phy = 0
        upper = end
        for _ in range(3):
            result = self.query_offsets(topic, key, max_num, begin, upper)
            if not result.phy_offsets:
                break
            last_ts = result.index_last_update_timestamp
            last_phy = result.index_last_update_phyoffset
            for n, offset in enumerate(sorted(result.phy_offsets)):
                record = read(offset)
                if record is None:
                    continue
                if n == 0:
                    upper = store_timestamp(record)
                records.append(record)
            if records or upper < begin:
                break
        return QueryMessageResult(tuple(records), last_ts, last_phy)

"""``local-file``: consumer offsets in a local JSON file (the BROADCASTING default).

Java's LocalFileOffsetStore, with a portable file format and a safer write.

Where: ``<dir>/<client_id>/<group>/offsets.json``. ``dir`` is the ``dir`` option,
else the ``RMQK_LOCAL_OFFSET_STORE_DIR`` environment variable, else
``~/.rocketmq_offsets`` (Java's ``rocketmq.client.localOffsetStoreDir`` default).

The file (Java writes fastjson with MessageQueue objects as map keys, which is
not JSON; this format is rmqk's own)::

    {"format": "rmqk-local-offsets", "version": 1, "group": "...", "clientId": "...",
     "offsets": [{"topic": "T", "brokerName": "broker-a", "queueId": 0, "offset": 42}]}

Writing, as Java 4.9.8 does: the file's current entries (main file, else the
backup) are merged with the in-memory offsets being persisted, so queues this
member no longer holds keep their last offset on disk. ``persist_all`` writes
only the queues it is given and leaves the others in memory.

Safety, beyond Java's ``MixAll.string2File``:

* the new content goes to ``offsets.json.tmp``, is fsynced, and is renamed over
  ``offsets.json``, so a crash leaves the old or the new file, never a torn one;
* a valid previous ``offsets.json`` is first kept as ``offsets.json.bak``;
* reads fall back to ``offsets.json.bak`` when the main file is missing, empty,
  unreadable or corrupt;
* a start is refused (``load`` raises ClientError naming both files and what to
  do) when a file is unreadable or corrupt and neither holds valid offsets, as
  Java's ``load`` throws: starting at ``consume_from_where`` would skip silently
  every message sent since the last persist;
* a file that cannot be parsed is never overwritten: before a write replaces or
  rotates it, it is renamed to ``offsets.json.corrupt-<ns>`` (Java would stop
  persisting for good when both files are bad; rmqk keeps the evidence and goes on);
* an unchanged content is not rewritten, so an idle consumer does not fsync every 5 s.

Options (``offset_store_options``): ``dir``; ``persist_mode``, ``"fsync"`` (the
default: file and directory are fsynced, a write survives power loss) or
``"no-fsync"`` (the rename is still atomic, so a process crash is safe, but the
last writes may be lost with the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.model.errors import ClientError
from rmqk.plugins.offsets.options import PERSIST_MODES, LocalFileOptions, parse_store_options
from rmqk.plugins.offsets.table import OffsetTable, TableBackedStore
from rmqk.spi.contracts import OffsetStoreContext

__all__ = [
    "DIR_ENV",
    "FILE_FORMAT",
    "FILE_VERSION",
    "NAME",
    "PERSIST_MODES",
    "FileRead",
    "FileState",
    "LocalFileOffsetStore",
    "OffsetFileError",
    "create_local_file_store",
    "decode_offsets",
    "default_dir",
    "encode_offsets",
    "read_offset_file",
]

log = logging.getLogger(__name__)

NAME = "local-file"
DIR_ENV = "RMQK_LOCAL_OFFSET_STORE_DIR"
FILE_NAME = "offsets.json"
FILE_FORMAT = "rmqk-local-offsets"
FILE_VERSION = 1


class OffsetFileError(ValueError):
    """An offsets file whose content is not the rmqk format."""


def default_dir() -> Path:
    """Where offsets go when the ``dir`` option is not given."""
    env = os.environ.get(DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    return Path.home() / ".rocketmq_offsets"


# -- the file format -----------------------------------------------------------------


def encode_offsets(offsets: Mapping[MessageQueue, int], group: str, client_id: str) -> bytes:
    """The file content for ``offsets``; entries in MessageQueue order, so equal tables
    give equal bytes."""
    doc = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "group": group,
        "clientId": client_id,
        "offsets": [
            {
                "topic": mq.topic,
                "brokerName": mq.broker_name,
                "queueId": mq.queue_id,
                "offset": offsets[mq],
            }
            for mq in sorted(offsets)
        ],
    }
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _int_field(entry: Mapping[str, Any], key: str, where: str, minimum: int) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OffsetFileError(f"{where}: {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _str_field(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise OffsetFileError(f"{where}: {key!r} must be a non-empty string, got {value!r}")
    return value


def decode_offsets(data: bytes) -> dict[MessageQueue, int]:
    """Parse a file's content; raises OffsetFileError saying what is wrong."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OffsetFileError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OffsetFileError(f"the top level must be an object, got {type(doc).__name__}")
    if doc.get("format") != FILE_FORMAT:
        raise OffsetFileError(f"'format' must be {FILE_FORMAT!r}, got {doc.get('format')!r}")
    version = doc.get("version")
    if version != FILE_VERSION or isinstance(version, bool):
        raise OffsetFileError(
            f"unsupported 'version' {version!r} (this rmqk reads version {FILE_VERSION})"
        )
    entries = doc.get("offsets")
    if not isinstance(entries, list):
        raise OffsetFileError(f"'offsets' must be a list, got {type(entries).__name__}")
    offsets: dict[MessageQueue, int] = {}
    for i, entry in enumerate(entries):
        where = f"offsets[{i}]"
        if not isinstance(entry, dict):
            raise OffsetFileError(f"{where} must be an object, got {entry!r}")
        mq = MessageQueue(
            _str_field(entry, "topic", where),
            _str_field(entry, "brokerName", where),
            _int_field(entry, "queueId", where, 0),
        )
        # -1 is what Java's tables hold for "unknown"; anything lower is damage.
        offsets[mq] = _int_field(entry, "offset", where, -1)
    return offsets


class FileState(enum.Enum):
    MISSING = "missing"
    EMPTY = "empty"
    UNREADABLE = "unreadable"  # an OSError other than "not found"
    CORRUPT = "corrupt"  # read, but not the rmqk format
    VALID = "valid"


@attrs.frozen
class FileRead:
    """What reading one offsets file found."""

    path: Path
    state: FileState
    offsets: Mapping[MessageQueue, int] = attrs.field(factory=dict)
    raw: bytes = b""
    reason: str = ""

    @property
    def bad(self) -> bool:
        """Holds data that could not be read: never destroy it."""
        return self.state in (FileState.CORRUPT, FileState.UNREADABLE)


def read_offset_file(path: Path) -> FileRead:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return FileRead(path, FileState.MISSING)
    except OSError as exc:
        return FileRead(path, FileState.UNREADABLE, reason=str(exc))
    if not raw.strip():
        return FileRead(path, FileState.EMPTY, raw=raw)
    try:
        offsets = decode_offsets(raw)
    except OffsetFileError as exc:
        return FileRead(path, FileState.CORRUPT, raw=raw, reason=str(exc))
    return FileRead(path, FileState.VALID, offsets, raw)


# -- the store ---------------------------------------------------------------------------


class LocalFileOffsetStore(TableBackedStore):
    """OffsetStore backed by ``<base_dir>/<client_id>/<group>/offsets.json``."""

    log = log

    def __init__(
        self, base_dir: Path | str, client_id: str, group: str, *, fsync: bool = True
    ) -> None:
        for what, part in (("client id", client_id), ("consumer group", group)):
            if not part or part in (".", "..") or any(c in part for c in "/\\\0"):
                raise ClientError(
                    f"{NAME} offset store: the {what} {part!r} cannot be used as a directory "
                    "name (empty, '.', '..', or containing '/', '\\' or NUL)"
                )
        self.group = group
        self.client_id = client_id
        self.fsync = fsync
        self.path = Path(base_dir).expanduser().absolute() / client_id / group / FILE_NAME
        self.bak_path = self.path.with_name(FILE_NAME + ".bak")
        self._table = OffsetTable()
        # Writes run in a worker thread; the lock keeps them in the order their
        # snapshots were taken, so an older snapshot never lands after a newer one.
        self._write_lock = asyncio.Lock()

    # -- OffsetStore ----------------------------------------------------------------------

    async def load(self) -> None:
        """Create the directory (a clear ClientError if that fails) and read the file."""
        offsets = await asyncio.to_thread(self._load_sync)
        if offsets:
            self._table.put_all(offsets)
            log.info(
                "load consumer's offset, group %s: %d queues from %s",
                self.group, len(offsets), self.path,
            )
            for mq, offset in sorted(offsets.items()):
                log.debug("load consumer's offset, %s %s %d", self.group, mq, offset)

    async def _read_from_store(self, mq: MessageQueue) -> int:
        try:
            stored = await asyncio.to_thread(self._read_store)
        except Exception:
            log.warning("reading %s failed", self.path, exc_info=True)
            return -1
        offset = stored.get(mq) if stored is not None else None
        return -1 if offset is None else offset

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        if not mqs:
            return
        await self._persist(set(mqs), "persistAll")

    async def persist(self, mq: MessageQueue) -> None:
        if mq in self._table:
            await self._persist({mq}, "persist")

    async def update_consume_offset_to_broker(
        self, mq: MessageQueue, offset: int, oneway: bool
    ) -> None:
        """Nothing: in BROADCASTING the broker keeps no offsets for the group.

        Kept (Java's LocalFileOffsetStore has it too) so a lite pull consumer in
        CLUSTERING given this store commits to memory only, as it always has,
        rather than writing the file on every commit.
        """

    # -- internals ------------------------------------------------------------------------

    async def _persist(self, mqs: set[MessageQueue], what: str) -> None:
        async with self._write_lock:
            changes = self._table.pick(mqs)
            if not changes:
                return
            try:
                written = await asyncio.to_thread(self._write_sync, changes)
            except Exception as exc:
                # Never raised into the engine: the next period tries again.
                log.error(
                    "%s consumer offset of group %s to %s failed: %s",
                    what, self.group, self.path, exc,
                )
                return
            if written:
                log.debug("[%s] group %s: %d offsets written to %s", what, self.group,
                          len(changes), self.path)

    def _make_dir(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _load_sync(self) -> dict[MessageQueue, int]:
        try:
            self._make_dir()
        except OSError as exc:
            raise ClientError(
                f"{NAME} offset store of group {self.group!r}: cannot create directory "
                f"{self.path.parent}: {exc.strerror or exc}"
            ) from exc
        stored = self._read_store()
        if stored is None:
            raise ClientError(self._refusal())
        return stored

    def _refusal(self) -> str:
        """Why a start is refused when no offsets file can be read (Java's load throws).

        Starting anyway would begin at ``consume_from_where`` (for broadcasting the
        queue's end) and silently skip every message sent since the last persist.
        """
        found = [read_offset_file(path) for path in (self.path, self.bak_path)]
        described = " and ".join(
            f"{f.path} is {f.state.value}" + (f" ({f.reason})" if f.reason else "") for f in found
        )
        return (
            f"{NAME} offset store of group {self.group!r}: the consumed offsets cannot be read: "
            f"{described}. Starting would skip what was sent meanwhile, so the consumer does "
            f"not start. Restore a good copy of {self.path.name} (or {self.bak_path.name}), or "
            f"move both files aside to start from consume_from_where."
        )

    def _read_store(self) -> dict[MessageQueue, int] | None:
        """The stored offsets: the main file, else the backup; None when neither can
        be read (Java's read error, which read_offset reports as -1)."""
        main = read_offset_file(self.path)
        if main.state is FileState.VALID:
            return dict(main.offsets)
        if main.bad:
            log.warning("offsets file %s is %s (%s); trying %s",
                        self.path, main.state.value, main.reason, self.bak_path.name)
        bak = read_offset_file(self.bak_path)
        if bak.state is FileState.VALID:
            return dict(bak.offsets)
        if bak.bad:
            log.error(
                "backup offsets file %s is %s (%s)", self.bak_path, bak.state.value, bak.reason
            )
            return None
        return None if main.bad else {}

    def _write_sync(self, changes: Mapping[MessageQueue, int]) -> bool:
        """Merge ``changes`` into the file; False when the content did not change."""
        self._make_dir()
        main = read_offset_file(self.path)
        if main.state is FileState.VALID:
            base = main.offsets
        else:
            bak = read_offset_file(self.bak_path)
            base = bak.offsets if bak.state is FileState.VALID else {}
            # Unreadable files are renamed away, never overwritten: the rotation below
            # would replace the backup, and the rename the main file.
            for bad in (main, bak):
                if bad.bad:
                    self._set_aside(bad)
        merged = {**base, **changes}
        data = encode_offsets(merged, self.group, self.client_id)
        if main.state is FileState.VALID and main.raw == data:
            return False
        if main.state is FileState.VALID:
            self._replace_with(self.bak_path, main.raw)
        self._replace_with(self.path, data)
        self._sync_dir()
        return True

    def _set_aside(self, found: FileRead) -> None:
        aside = found.path.with_name(f"{found.path.name}.corrupt-{time.time_ns()}")
        log.error(
            "offsets file %s is %s (%s); keeping it as %s",
            found.path, found.state.value, found.reason, aside.name,
        )
        os.replace(found.path, aside)

    def _replace_with(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise

    def _sync_dir(self) -> None:
        if not self.fsync or os.name != "posix":
            return
        # The renames are durable only once the directory entry is on disk.
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def create_local_file_store(context: OffsetStoreContext) -> LocalFileOffsetStore:
    """``local-file`` from Python, its options read from ``context.options``."""
    return build_local_file_store(
        context, parse_store_options(NAME, LocalFileOptions, context.options)
    )


def build_local_file_store(
    context: OffsetStoreContext, options: LocalFileOptions
) -> LocalFileOffsetStore:
    """The registered factory of ``local-file``."""
    base_dir = default_dir() if options.dir is None else Path(options.dir)
    return LocalFileOffsetStore(
        base_dir, context.client_id, context.group, fsync=options.persist_mode == "fsync"
    )

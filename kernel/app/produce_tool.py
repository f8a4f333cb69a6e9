"""``rmqk produce``: send generated messages or JSON lines from stdin, with progress."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator

from rmqk.engine.producer import AsyncProducer
from rmqk.model.errors import ClientError, RmqkError
from rmqk.model.message import Message

__all__ = ["DEFAULT_COUNT", "DEFAULT_SIZE", "check_args", "produce"]

DEFAULT_COUNT = 1000
DEFAULT_SIZE = 100


def _tags(args: argparse.Namespace) -> list[str]:
    return [t for t in args.tags.split(",") if t]


def _count(args: argparse.Namespace) -> int:
    return DEFAULT_COUNT if args.count is None else int(args.count)


def _size(args: argparse.Namespace) -> int:
    return DEFAULT_SIZE if args.size is None else int(args.size)


def check_args(args: argparse.Namespace) -> None:
    """Refuse options that would be ignored or make no sense, before connecting."""
    if args.stdin:
        given = [f for f, v in (("--count", args.count), ("--size", args.size)) if v is not None]
        if given:
            raise RmqkError(
                f"{' and '.join(given)} describe generated messages; --stdin reads them "
                "from stdin: give one or the other"
            )
    for flag, value in (("--count", args.count), ("--size", args.size)):
        if value is not None and value < 0:
            raise RmqkError(f"{flag} must be 0 or more, got {value}")
    if args.batch < 1:
        raise RmqkError(f"--batch must be 1 or more, got {args.batch}")


def _generated(args: argparse.Namespace) -> Iterator[Message]:
    tags = _tags(args)
    size = _size(args)
    filler = os.urandom(max(size, 1)).hex()
    for i in range(_count(args)):
        head = f"{i}:".encode()
        body = (head + filler.encode())[: max(size, len(head))]
        yield Message(args.topic, body, tags=tags[i % len(tags)] if tags else None, keys=f"k{i}")


class _Line:
    """One input line: its number, and the message it holds or why it holds none."""

    __slots__ = ("error", "lineno", "message")

    def __init__(self, lineno: int, message: Message | None, error: str = "") -> None:
        self.lineno = lineno
        self.message = message
        self.error = error


def _from_stdin(args: argparse.Namespace) -> Iterator[_Line]:
    # Message N takes --tags round robin, as generated ones do, unless its line names its own.
    tags = _tags(args)
    n = 0
    for lineno, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            continue
        default_tag = tags[n % len(tags)] if tags else None
        try:
            message = _parse_line(line, args.topic, default_tag)
        except ValueError as exc:
            yield _Line(lineno, None, str(exc))
            continue
        n += 1
        yield _Line(lineno, message)


def _parse_line(line: str, topic: str, default_tag: str | None = None) -> Message:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict) or "body" not in obj:
        raise ValueError('expected an object with a "body"')
    body = obj["body"]
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    props = obj.get("properties") or {}
    if not isinstance(props, dict):
        raise ValueError('"properties" must be an object')
    return Message(
        obj.get("topic", topic),
        data,
        tags=obj.get("tags") or default_tag,
        keys=obj.get("keys"),
        properties={str(k): str(v) for k, v in props.items()},
    )


def _generated_lines(args: argparse.Namespace) -> Iterator[_Line]:
    for i, msg in enumerate(_generated(args), 1):
        yield _Line(i, msg)


def _stopped(where: str, why: str, sent: int, last_sent_line: int, stdin: bool) -> ClientError:
    """The error for input that stops a send part-way, saying exactly what went out.

    Lines are sent in order, so everything before the failing line was sent and
    nothing from it on: a retry resumes from that line without duplicates.
    """
    if not stdin:
        return ClientError(f"{where}: {why}; {sent} message(s) were sent before it")
    if sent == 0:
        done = "nothing was sent"
    else:
        done = f"lines 1-{last_sent_line} were sent ({sent} message(s)), nothing after them"
    return ClientError(
        f"{where}: {why}; {done}. Fix the input and resume from the first line not sent "
        f"(e.g. tail -n +{last_sent_line + 1})"
    )


class _Progress:
    def __init__(self, total: int | None) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def show(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.tty or (not force and now - self.last < 0.2):
            return
        self.last = now
        if self.total:
            width = 30
            filled = int(width * done / self.total)
            bar = "#" * filled + "-" * (width - filled)
            sys.stderr.write(f"\r[{bar}] {done}/{self.total}")
        else:
            sys.stderr.write(f"\r{done} sent")
        sys.stderr.flush()


async def produce(args: argparse.Namespace) -> int:
    check_args(args)
    lines = _from_stdin(args) if args.stdin else _generated_lines(args)
    progress = _Progress(None if args.stdin else _count(args))
    started = time.monotonic()
    sent = 0
    last_sent_line = 0
    async with AsyncProducer(
        args.group, namesrv_addr=args.namesrv, namespace=getattr(args, "namespace", None)
    ) as producer:
        batch: list[tuple[int, Message]] = []

        async def flush() -> None:
            nonlocal sent, last_sent_line, batch
            if not batch:
                return
            pending, batch = batch, []
            try:
                if len(pending) == 1:
                    await producer.send(pending[0][1])
                else:
                    await producer.send_batch([msg for _, msg in pending])
            except Exception as exc:
                first = pending[0][0]
                where = f"stdin line {first}" if args.stdin else f"message {first}"
                why = f"send failed: {exc}"
                raise _stopped(where, why, sent, last_sent_line, args.stdin) from exc
            sent += len(pending)
            last_sent_line = pending[-1][0]
            progress.show(sent)

        for line in lines:
            if line.message is None:
                # Send what came before the bad line, so the report below is exact.
                await flush()
                raise _stopped(
                    f"stdin line {line.lineno}", line.error, sent, last_sent_line, args.stdin
                )
            batch.append((line.lineno, line.message))
            if len(batch) >= max(args.batch, 1):
                await flush()
        await flush()
    progress.show(sent, force=True)
    elapsed = time.monotonic() - started
    if progress.tty:
        sys.stderr.write("\n")
    rate = sent / elapsed if elapsed > 0 else 0.0
    print(f"sent {sent} messages to {args.topic} in {elapsed:.2f} s ({rate:,.0f} msg/s)")
    return 0

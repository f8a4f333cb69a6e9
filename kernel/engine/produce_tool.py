"""``rmqk produce``: send generated messages or JSON lines from stdin, with progress."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator

from rmqk.engine.producer import AsyncProducer
from rmqk.errors import ClientError
from rmqk.message import Message

__all__ = ["produce"]


def _generated(args: argparse.Namespace) -> Iterator[Message]:
    tags = [t for t in args.tags.split(",") if t]
    filler = os.urandom(max(args.size, 1)).hex()
    for i in range(args.count):
        head = f"{i}:".encode()
        body = (head + filler.encode())[: max(args.size, len(head))]
        yield Message(args.topic, body, tags=tags[i % len(tags)] if tags else None, keys=f"k{i}")


def _from_stdin(args: argparse.Namespace) -> Iterator[Message]:
    for lineno, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ClientError(f"stdin line {lineno}: not JSON: {exc}") from None
        if not isinstance(obj, dict) or "body" not in obj:
            raise ClientError(f'stdin line {lineno}: expected an object with a "body"')
        body = obj["body"]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        props = obj.get("properties") or {}
        if not isinstance(props, dict):
            raise ClientError(f'stdin line {lineno}: "properties" must be an object')
        yield Message(
            obj.get("topic", args.topic),
            data,
            tags=obj.get("tags"),
            keys=obj.get("keys"),
            properties={str(k): str(v) for k, v in props.items()},
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
    source = _from_stdin(args) if args.stdin else _generated(args)
    progress = _Progress(None if args.stdin else args.count)
    started = time.monotonic()
    sent = 0
    async with AsyncProducer(args.group, namesrv_addr=args.namesrv) as producer:
        batch: list[Message] = []
        for msg in source:
            if args.batch > 1:
                batch.append(msg)
                if len(batch) >= args.batch:
                    await producer.send_batch(batch)
                    sent += len(batch)
                    batch = []
            else:
                await producer.send(msg)
                sent += 1
            progress.show(sent)
        if batch:
            await producer.send_batch(batch)
            sent += len(batch)
    progress.show(sent, force=True)
    elapsed = time.monotonic() - started
    if progress.tty:
        sys.stderr.write("\n")
    rate = sent / elapsed if elapsed > 0 else 0.0
    print(f"sent {sent} messages to {args.topic} in {elapsed:.2f} s ({rate:,.0f} msg/s)")
    return 0

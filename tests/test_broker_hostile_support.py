"""Helpers for the hostile-client tests of the embedded broker (no tests here).

A hostile client writes what rmqk's own codec refuses to write (lone surrogates in
header fields), so these helpers build JSON frames by hand.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Mapping
from typing import Any

from test_broker_support import JAVA_4_9_8, RawClient

from rmqk.wire.frame import FrameDecoder
from rmqk.wire.protocol import RemotingCommand

_opaques = iter(range(500_000, 10**9))


def json_frame(code: int, opaque: int, fields: Mapping[str, str], body: bytes = b"") -> bytes:
    """A JSON-serialized request frame; ``json.dumps`` escapes lone surrogates as \\uXXXX."""
    header = json.dumps(
        {
            "code": code,
            "language": "JAVA",
            "version": JAVA_4_9_8,
            "opaque": opaque,
            "flag": 0,
            "extFields": dict(fields),
        }
    ).encode("ascii")
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


async def raw_call(
    client: RawClient,
    code: int,
    fields: Mapping[str, str],
    body: bytes = b"",
    *,
    timeout: float = 5.0,
) -> RemotingCommand:
    """Send a hand-built frame through ``client`` and wait for its answer."""
    opaque = next(_opaques)
    future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    client.pending[opaque] = future
    client.write_raw(json_frame(code, opaque, fields, body))
    return await asyncio.wait_for(future, timeout)


def heartbeat_body(
    groups: list[str], topics: list[str] | None = None, producers: list[str] | None = None
) -> bytes:
    subs = [
        {"topic": t, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
         "classFilterMode": False, "expressionType": "TAG"}
        for t in topics or []
    ]  # fmt: skip
    return json.dumps(
        {
            "clientID": "127.0.0.1@hostile",
            "producerDataSet": [{"groupName": p} for p in producers or []],
            "consumerDataSet": [
                {
                    "groupName": g,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": subs,
                    "unitMode": False,
                }
                for g in groups
            ],
        }
    ).encode("ascii")


class SyncClient:
    """A blocking client for hypothesis tests (one request at a time)."""

    def __init__(self, addr: str, timeout: float = 5.0) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = FrameDecoder()
        self.backlog: list[RemotingCommand] = []

    def call(self, code: int, fields: Mapping[str, str], body: bytes = b"") -> RemotingCommand:
        """Send one request; raises TimeoutError when it gets no answer."""
        opaque = next(_opaques)
        self.sock.sendall(json_frame(code, opaque, fields, body))
        while True:
            for cmd in self.backlog:
                if cmd.is_response and cmd.opaque == opaque:
                    self.backlog.remove(cmd)
                    return cmd
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.backlog.extend(f.command for f in self.decoder.feed_typed(data))
            # Broker-to-client requests (NOTIFY_CONSUMER_IDS_CHANGED) are not answers.
            self.backlog = [c for c in self.backlog if c.is_response]

    def close(self) -> None:
        self.sock.close()


def json_of(response: RemotingCommand) -> Any:
    return json.loads(response.body.decode("utf-8"))

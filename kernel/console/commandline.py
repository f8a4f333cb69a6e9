"""What ``rmqk`` sub-commands share, the built-in ones and the plugins' alike.

Argument types, the TLS flags of a command that connects to a cluster, and a message
as one JSON line. Helpers, not a contract: the contract of a sub-command is
:class:`rmqk.spi.commands.Command`.
"""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any

from rmqk.model.message import MessageExt

__all__ = ["add_tls_arguments", "message_json", "positive_int", "tls_client_options"]


def positive_int(text: str) -> int:
    """An argparse type: an integer of 1 or more (a bad one is a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer of 1 or more, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _body(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}


def message_json(msg: MessageExt) -> str:
    """One JSON line under MessageExt's attribute names; a non-UTF-8 body is base64-encoded."""
    obj: dict[str, object] = {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "tags": msg.tags,
        "keys": msg.keys,
        "properties": dict(msg.properties),
        **_body(msg.body),
    }
    return json.dumps(obj, ensure_ascii=False)


# The client options the TLS flags set, each with the value an unset flag leaves.
_TLS_FLAGS: tuple[tuple[str, object], ...] = (
    ("use_tls", False),
    ("tls_ca_file", None),
    ("tls_cert_file", None),
    ("tls_key_file", None),
    ("tls_verify", True),
)


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls``, ``--tls-ca-file``, ``--tls-cert-file``, ``--tls-key-file``,
    ``--tls-no-verify``: the client options ``use_tls`` and ``tls_*`` of a command
    that connects to a cluster. The account comes from RMQK_ACCESS_KEY /
    RMQK_SECRET_KEY, never from a command line that ``ps`` shows."""
    tls = parser.add_argument_group(
        "TLS and ACL",
        "Requests are signed with RMQK_ACCESS_KEY / RMQK_SECRET_KEY (and "
        "RMQK_SECURITY_TOKEN) when set.",
    )
    tls.add_argument(
        "--tls", action="store_true", dest="use_tls", help="connect over TLS (use_tls)"
    )
    tls.add_argument("--tls-ca-file", metavar="PEM", help="CA certificates to trust (tls_ca_file)")
    tls.add_argument("--tls-cert-file", metavar="PEM", help="client certificate (tls_cert_file)")
    tls.add_argument("--tls-key-file", metavar="PEM", help="its key (tls_key_file)")
    tls.add_argument(
        "--tls-no-verify",
        action="store_false",
        dest="tls_verify",
        help="accept any broker certificate (tls_verify = false)",
    )


def tls_client_options(args: argparse.Namespace) -> dict[str, Any]:
    """The client options :func:`add_tls_arguments`' flags set (only those given)."""
    return {
        key: getattr(args, key) for key, unset in _TLS_FLAGS if getattr(args, key, unset) != unset
    }

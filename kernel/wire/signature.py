"""How a request is signed for Apache's plain ACL: the client signs, the broker checks.

One implementation for both sides: the tcp transport's signing hook
(:mod:`rmqk.plugins.remoting.acl`) and the embedded broker's validator.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from rmqk.spi.transport import Credentials
from rmqk.wire.protocol import RemotingCommand

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "calculate_signature",
    "sign",
    "signature_content",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def _java_string_order(key: str) -> bytes:
    # Java's TreeMap orders String keys by UTF-16 code units.
    return key.encode("utf-16-be", "surrogatepass")


def signature_content(fields: Mapping[str, str], body: bytes | None) -> bytes:
    """What is signed (AclUtils.combineRequestContent): sorted field values, then the body."""
    text = "".join(
        fields[key] for key in sorted(fields, key=_java_string_order) if key != SIGNATURE
    )
    return text.encode("utf-8") + (body or b"")


def calculate_signature(content: bytes, secret_key: str) -> str:
    """base64(HmacSHA1(secret_key, content)) (AclSigner)."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign(request: RemotingCommand, credentials: Credentials) -> None:
    """Add AccessKey, SecurityToken (if any) and Signature to ``request``.

    Signing again with other credentials replaces the first signature whole: a
    security token of the first is not left behind to be signed with the second.
    """
    request.ext_fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        request.ext_fields[SECURITY_TOKEN] = credentials.security_token
    else:
        request.ext_fields.pop(SECURITY_TOKEN, None)
    content = signature_content(request.ext_fields, request.body)
    request.ext_fields[SIGNATURE] = calculate_signature(content, credentials.secret_key)

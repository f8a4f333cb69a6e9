"""Remoting commands as an Apache 4.9.8 server writes them, and typed reads of request headers.

Shared by the name server, the broker's processors and the admin client.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmqk.wire.protocol import (
    RPC_TYPE_RESPONSE,
    LanguageCode,
    RemotingCommand,
    ResponseCode,
    stringify_fields,
)

__all__ = [
    "APACHE_VERSION",
    "FAQ_SUFFIX",
    "HeaderError",
    "Headers",
    "make_request",
    "make_response",
]

# What an Apache 4.9.8 server puts in the version field (MQVersion.Version.V4_9_8.ordinal()).
APACHE_VERSION = 409
# What Apache appends to many remarks (FAQUrl.suggestTodo).
FAQ_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def make_response(
    request: RemotingCommand,
    code: int = ResponseCode.SUCCESS,
    remark: str | None = None,
    fields: Mapping[str, object] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """A response as an Apache server writes it: language JAVA, version 4.9.8."""
    response = RemotingCommand(
        code,
        body=body,
        remark=remark,
        opaque=request.opaque,
        flag=RPC_TYPE_RESPONSE,
        language=LanguageCode.JAVA,
        version=APACHE_VERSION,
    )
    if fields:
        response.ext_fields = stringify_fields(fields)
    return response


def make_request(
    code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
) -> RemotingCommand:
    """A request this side sends (broker→client, or admin→server)."""
    return RemotingCommand.request(
        code, fields, body, language=LanguageCode.JAVA, version=APACHE_VERSION
    )


class HeaderError(Exception):
    """A request header Apache would fail to decode; answered with SYSTEM_ERROR and this remark."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


_NULL_FIELD = (
    "org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom field <{}> is null"
)
_NPE = "java.lang.NullPointerException"


class Headers:
    """Typed reads of a request's ``extFields`` with Apache's failure remarks.

    A missing ``@CFNotNull`` field fails the decode with RemotingCommandException;
    a field that does not parse as a number is left null by Java, which then
    fails with a NullPointerException where it is used.
    """

    __slots__ = ("_fields",)

    def __init__(self, request: RemotingCommand) -> None:
        self._fields = request.ext_fields

    def require(self, *names: str) -> None:
        for name in names:
            if self._fields.get(name) is None:
                raise HeaderError(_NULL_FIELD.format(name))

    def text(self, name: str) -> str:
        value = self._fields.get(name)
        if value is None:
            raise HeaderError(_NULL_FIELD.format(name))
        return value

    def opt_text(self, name: str) -> str | None:
        return self._fields.get(name)

    def number(self, name: str) -> int:
        value = self._fields.get(name)
        if value is None:
            raise HeaderError(_NULL_FIELD.format(name))
        return _parse_int(value)

    def opt_number(self, name: str, default: int | None = None) -> int | None:
        value = self._fields.get(name)
        if value is None:
            return default
        try:
            return int(value.strip())
        except ValueError:
            return default

    def lenient_number(self, name: str) -> int:
        """A required number of a fast-decoded header: missing or bad is a null dereference."""
        value = self._fields.get(name)
        if value is None:
            raise HeaderError(_NPE)
        return _parse_int(value)

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._fields.get(name)
        if value is None:
            return default
        return value.strip().lower() == "true"

    def opt_boolean(self, name: str) -> bool | None:
        value = self._fields.get(name)
        if value is None:
            return None
        return value.strip().lower() == "true"


def _parse_int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise HeaderError(_NPE) from None

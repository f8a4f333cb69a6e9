"""Reading broker responses: the checks every call of the ``tcp`` transport shares.

An error code becomes :class:`~rmqk.model.errors.BrokerError` (as ``MQClientAPIImpl``
throws ``MQBrokerException``); a header field that is missing or not a number is a
protocol fault, reported as :class:`~rmqk.wire.bodies.BodyFormatError`.
"""

from __future__ import annotations

from rmqk.model.errors import BrokerError
from rmqk.wire.bodies import BodyFormatError
from rmqk.wire.protocol import RemotingCommand, ResponseCode

__all__ = ["check_success", "header_int", "protocol_error"]


def protocol_error(addr: str, code: int, what: str) -> BodyFormatError:
    return BodyFormatError(f"response code {code} from {addr}: {what}")


def header_int(response: RemotingCommand, name: str, addr: str) -> int:
    value = response.ext_fields.get(name)
    if value is None:
        raise protocol_error(addr, response.code, f"header field {name!r} is missing")
    try:
        return int(value)
    except ValueError:
        raise protocol_error(
            addr, response.code, f"header field {name!r}={value!r} is not an integer"
        ) from None


def check_success(response: RemotingCommand, addr: str) -> None:
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, response.remark, addr)

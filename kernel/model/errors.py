"""The exception types rmqk raises. Every one says what was wrong and where."""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "ClientError",
    "ConfigError",
    "ConfigProblem",
    "FrameError",
    "PluginError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendError",
    "RemotingTimeoutError",
    "RemotingTooMuchRequestError",
    "RequestTimeoutError",
    "RmqkError",
    "SendFailedError",
    "SinkHalted",
    "SubscriptionRefusedError",
]


class RmqkError(Exception):
    """Base of every error rmqk raises on purpose."""


class PluginError(RmqkError):
    """An unknown or duplicate plugin name, or a plugin that failed to load."""


class SinkHalted(RmqkError):
    """A sink refuses to go on (a body it cannot parse, with ``on_bad_body = "fail"``).

    The future of every batch the sink cannot take fails with it. The consume
    service neither acknowledges nor sends back such a batch, so its offset is not
    committed, and ``rmqk run`` stops the consumer with this error.
    """


class ConfigProblem:
    """One mistake in a config file: where it is and what is allowed."""

    __slots__ = ("key", "message", "path", "table")

    def __init__(self, path: str, table: str, key: str | None, message: str) -> None:
        self.path = path
        self.table = table
        self.key = key
        self.message = message

    def __str__(self) -> str:
        where = f"[{self.table}]" if self.table else "top level"
        if self.key:
            where += f" {self.key}"
        return f"{self.path}: {where}: {self.message}"

    def __repr__(self) -> str:
        return f"ConfigProblem({self!s})"


class ConfigError(RmqkError):
    """A config file (or consumer options) with one or more mistakes, all reported together."""

    def __init__(self, problems: list[ConfigProblem] | str) -> None:
        if isinstance(problems, str):
            problems = [ConfigProblem("<options>", "", None, problems)]
        self.problems = problems
        lines = [str(p) for p in problems]
        head = "1 problem" if len(lines) == 1 else f"{len(lines)} problems"
        super().__init__(f"{head} in config:\n  " + "\n  ".join(lines))


class ClientError(RmqkError):
    """Misuse of the client API or a failed client operation (Java's MQClientException)."""


class SendFailedError(ClientError):
    """Every attempt of a send failed (Java's MQClientException "Send [n] times, still failed").

    ``response_code`` is the last broker's code, or Java's ClientErrorCode when no
    broker answered (10001 connect, 10002 timeout, 10003 broker not found; -1 other);
    the last failure is the ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        response_code: int,
        attempts: int,
        brokers_sent: tuple[str, ...],
    ) -> None:
        self.response_code = response_code
        self.attempts = attempts
        self.brokers_sent = brokers_sent
        super().__init__(message)


class RequestTimeoutError(ClientError):
    """A request was sent but no reply came in time (Java's RequestTimeoutException).

    ``correlation_id`` names the request (its CORRELATION_ID property), so a reply
    that arrives later can be matched to it in the log.
    """

    # ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION
    response_code = 10006

    def __init__(self, message: str, *, correlation_id: str) -> None:
        self.correlation_id = correlation_id
        super().__init__(message)


class BrokerError(RmqkError):
    """A broker or name server answered with an error code (Java's MQBrokerException)."""

    def __init__(self, code: int, remark: str | None, address: str | None = None) -> None:
        self.code = code
        self.remark = remark
        self.address = address
        where = f" from {address}" if address else ""
        super().__init__(f"broker error code {code}{where}: {remark or '(no remark)'}")


class SubscriptionRefusedError(BrokerError):
    """A broker refused a subscription at CHECK_CLIENT_CONFIG (Java's checkClientInBroker)."""

    def __init__(
        self, code: int, remark: str | None, address: str | None, topic: str, expression: str
    ) -> None:
        super().__init__(code, remark, address)
        self.topic = topic
        self.expression = expression
        self.args = (
            f"the broker at {address} refused the subscription to {topic!r} by "
            f"{expression!r}: code {code}: {remark or '(no remark)'}",
        )


class RemotingError(RmqkError):
    """A failure of the remoting layer (connection, timeout, framing)."""


class RemotingConnectError(RemotingError):
    """Could not connect to, or lost the connection to, an address."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the request's timeout."""


class RemotingTooMuchRequestError(RemotingError):
    """A call's time budget was spent before it could be made (RemotingTooMuchRequestException)."""


class RemotingSendError(RemotingError):
    """The request could not be written to the connection."""


class FrameError(RemotingError):
    """A malformed frame: the connection that carried it is closed."""

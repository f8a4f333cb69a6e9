"""rmqk: a pure-Python, plugin-based consumer kernel for Apache RocketMQ 4.x."""

from __future__ import annotations

from rmqk.errors import (
    BrokerError,
    ClientError,
    ConfigError,
    PluginError,
    RemotingError,
    RmqkError,
)
from rmqk.hookspecs import hookimpl
from rmqk.message import Message, MessageExt
from rmqk.model import (
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
    SubscriptionData,
)

__version__ = "0.1.0"

__all__ = [
    "BrokerError",
    "ClientError",
    "ConfigError",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "PluginError",
    "PullResult",
    "PullStatus",
    "RemotingError",
    "RmqkError",
    "SubscriptionData",
    "__version__",
    "hookimpl",
]

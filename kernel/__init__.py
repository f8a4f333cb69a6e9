"""rmqk: a pure-Python, plugin-based consumer kernel for Apache RocketMQ 4.x."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmqk import _moved
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
from rmqk.model.errors import (
    BrokerError,
    ClientError,
    ConfigError,
    PluginError,
    RemotingError,
    RmqkError,
)
from rmqk.model.message import Message, MessageExt
from rmqk.spi.hookspecs import hookimpl

__version__ = "0.1.0"

# Module paths of the old layout still import, with a DeprecationWarning (rmqk._moved).
_moved.install()

# The engine is imported on first use so that `import rmqk` stays cheap for tools
# and for Spark workers that only need the model.
_LAZY = {
    "ClientOptions": "rmqk.spi.client_options",
    "DeferredAck": "rmqk.spi.consume",
    "PushConsumer": "rmqk.engine.sync",
    "Producer": "rmqk.engine.sync",
    "AsyncPushConsumer": "rmqk.engine.consumer",
    "LitePullConsumer": "rmqk.engine.sync",
    "AsyncLitePullConsumer": "rmqk.engine.lite_pull",
    "AsyncProducer": "rmqk.engine.producer",
    "TransactionProducer": "rmqk.engine.sync",
    "AsyncTransactionProducer": "rmqk.engine.transaction",
    "LocalTransactionState": "rmqk.engine.transaction",
    "TransactionSendResult": "rmqk.engine.transaction",
    "OffsetsGoneError": "rmqk.engine.reader",
    "RangeGap": "rmqk.engine.reader",
    "RangeReader": "rmqk.engine.reader",
    "ReaderSettings": "rmqk.engine.reader",
    "create_reply_message": "rmqk.engine.request_reply",
    "load_config": "rmqk.app.config",
    "ComposedConsumer": "rmqk.app.runtime",
}


if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from rmqk.app.config import load_config
    from rmqk.app.runtime import ComposedConsumer
    from rmqk.engine.consumer import AsyncPushConsumer
    from rmqk.engine.lite_pull import AsyncLitePullConsumer
    from rmqk.engine.producer import AsyncProducer
    from rmqk.engine.reader import OffsetsGoneError, RangeGap, RangeReader, ReaderSettings
    from rmqk.engine.request_reply import create_reply_message
    from rmqk.engine.sync import LitePullConsumer, Producer, PushConsumer, TransactionProducer
    from rmqk.engine.transaction import (
        AsyncTransactionProducer,
        LocalTransactionState,
        TransactionSendResult,
    )
    from rmqk.spi.client_options import ClientOptions
    from rmqk.spi.consume import DeferredAck


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rmqk' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AsyncLitePullConsumer",
    "AsyncProducer",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "BrokerError",
    "ClientError",
    "ClientOptions",
    "ComposedConsumer",
    "ConfigError",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "DeferredAck",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "OffsetsGoneError",
    "PluginError",
    "Producer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "RangeGap",
    "RangeReader",
    "ReaderSettings",
    "RemotingError",
    "RmqkError",
    "SubscriptionData",
    "TransactionProducer",
    "TransactionSendResult",
    "__version__",
    "create_reply_message",
    "hookimpl",
    "load_config",
]

"""The embedded broker's request processors, one module per Apache 4.9.8 processor.

Each follows its Apache counterpart (SendMessageProcessor, PullMessageProcessor,
QueryMessageProcessor, ClientManageProcessor, ConsumerManageProcessor,
EndTransactionProcessor, AdminBrokerProcessor) in what a client can observe:
response codes, remarks, header fields and bodies. Where the embedded broker
knowingly differs, the module's docstring says so. ``dispatcher`` maps request
codes to them.
"""

from __future__ import annotations

from rmqk.plugins.broker.processors.context import BrokerSettings
from rmqk.plugins.broker.processors.dispatcher import BrokerProcessors
from rmqk.plugins.broker.processors.topics import perm_to_string

__all__ = ["BrokerProcessors", "BrokerSettings", "perm_to_string"]

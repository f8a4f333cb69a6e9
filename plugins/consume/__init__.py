"""The ``concurrent`` and ``orderly`` consume services."""

from __future__ import annotations

from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.plugins.consume.orderly import OrderlyConsumeService
from rmqk.spi.factory import PluginFactory
from rmqk.spi.hookspecs import Register, hookimpl


@hookimpl
def rmqk_register_consume_services(register: Register) -> None:
    # Each class is its factory, built as (host, options); concurrent takes no options.
    register(PluginFactory("concurrent", ConcurrentConsumeService))
    register(
        PluginFactory("orderly", OrderlyConsumeService, options=OrderlyConsumeService.option_specs)
    )

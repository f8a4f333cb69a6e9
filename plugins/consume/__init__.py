"""The ``concurrent`` and ``orderly`` consume services."""

from __future__ import annotations

from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.plugins.consume.orderly import OrderlyConsumeService
from rmqk.spi.hookspecs import Register, hookimpl


@hookimpl
def rmqk_register_consume_services(register: Register) -> None:
    register("concurrent", ConcurrentConsumeService)
    register("orderly", OrderlyConsumeService)

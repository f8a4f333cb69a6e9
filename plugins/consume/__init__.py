"""The ``concurrent`` and ``orderly`` consume services."""

from __future__ import annotations

from rmqk.hookspecs import Register, hookimpl
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.plugins.consume.orderly import OrderlyConsumeService


@hookimpl
def rmqk_register_consume_services(register: Register) -> None:
    register("concurrent", ConcurrentConsumeService)
    register("orderly", OrderlyConsumeService)

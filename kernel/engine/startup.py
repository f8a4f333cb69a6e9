"""Start-up steps the push and lite-pull consumers share.

Both resolve the name servers the same way, name their client instance the same
way (so that consumers of one process share a connection pool, as in Java's
MQClientManager), and create and load their offset store from the registries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from rmqk.engine.client import ClientConfig, ClientInstance, build_client_id
from rmqk.engine.rebalance import rebalance_wait_interval_ms
from rmqk.model import MessageModel, ServiceState
from rmqk.model.errors import ClientError
from rmqk.options import ConsumerOptions
from rmqk.pluginmanager import registries
from rmqk.spi.client_options import ClientOptions
from rmqk.spi.contracts import OffsetStore, OffsetStoreContext

__all__ = [
    "client_config",
    "client_for",
    "client_id_for",
    "load_offset_store",
    "resolve_namesrv",
    "start_once",
]


class _Startable(Protocol):
    state: ServiceState


async def start_once(
    service: _Startable,
    kind: str,
    start: Callable[[], Awaitable[None]],
    cleanup: Callable[[], Awaitable[None]],
) -> None:
    """Java's start state machine: CREATE_JUST -> START_FAILED -> (``start`` sets) RUNNING.

    A second start raises; a start that fails undoes what it did (``cleanup``)
    unless ``start`` itself moved the state on.
    """
    if service.state is not ServiceState.CREATE_JUST:
        raise ClientError(
            f"The {kind} service state not OK, maybe started once, {service.state.value}"
        )
    service.state = ServiceState.START_FAILED
    try:
        await start()
    except BaseException:
        if service.state is ServiceState.START_FAILED:
            await cleanup()
        raise


def resolve_namesrv(options: ClientOptions) -> tuple[str, ...]:
    """The option ``namesrv_addr``, else ``NAMESRV_ADDR`` (``;``-separated), as Java reads it."""
    if options.namesrv_addr:
        return tuple(options.namesrv_addr)
    addr = os.environ.get("NAMESRV_ADDR")
    if not addr:
        raise ClientError("namesrv_addr is not set (option namesrv_addr or env NAMESRV_ADDR)")
    return tuple(a for a in addr.split(";") if a)


def client_id_for(options: ClientOptions, pid_instance_name: bool) -> str:
    """The client id (ip@instance[@unit]); with ``pid_instance_name`` an instance name
    left at DEFAULT becomes ``pid#nanos``, as Java's changeInstanceNameToPID does, so
    two processes on one host differ."""
    instance_name = options.instance_name
    if pid_instance_name and instance_name == "DEFAULT":
        instance_name = f"{os.getpid()}#{time.monotonic_ns()}"
    return build_client_id(instance_name, options.unit_name, options.client_ip)


def client_config(
    options: ClientOptions,
    namesrv: tuple[str, ...],
    transport: str,
    transport_options: Mapping[str, Any],
    **more: Any,
) -> ClientConfig:
    """The instance settings a client's options make (``more``: the consumer's own)."""
    return ClientConfig(
        namesrv_addrs=namesrv,
        transport=transport,
        transport_options=transport_options,
        vip_channel_enabled=options.vip_channel_enabled,
        poll_name_server_interval_ms=options.poll_name_server_interval,
        heartbeat_broker_interval_ms=options.heartbeat_broker_interval,
        request_timeout_ms=options.mq_client_api_timeout,
        use_tls=options.use_tls,
        tls=options.tls,
        credentials=options.credentials,
        **more,
    )


def client_for(
    options: ConsumerOptions, message_model: MessageModel, namesrv: tuple[str, ...]
) -> ClientInstance:
    """The client instance this consumer's client id and settings name (created if new).

    A clustering consumer left at instance name DEFAULT gets ``pid#nanos`` instead,
    as Java's changeInstanceNameToPID does, so two processes on one host differ.
    """
    return ClientInstance.get_or_create(
        client_id_for(options, message_model is MessageModel.CLUSTERING),
        client_config(
            options,
            namesrv,
            options.transport,
            options.transport_options,
            persist_consumer_offset_interval_ms=options.persist_consumer_offset_interval,
            rebalance_interval_ms=rebalance_wait_interval_ms(),
        ),
    )


async def load_offset_store(
    options: ConsumerOptions, group: str, message_model: MessageModel, client: ClientInstance
) -> OffsetStore:
    """The registered offset store the options name, loaded."""
    store: OffsetStore = registries().offset_stores.create(
        options.effective_offset_store,
        OffsetStoreContext(
            group=group,
            client_id=client.client_id,
            message_model=message_model,
            options=options.offset_store_options,
            client=client,
        ),
        options.offset_store_options,
    )
    await store.load()
    return store

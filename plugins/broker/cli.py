"""``rmqk broker``: runs the embedded name server and broker until interrupted.

``rmqk admin`` lives in ``admin_cli``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any, TypeVar

import attrs

from rmqk.model.errors import RmqkError
from rmqk.plugins.broker.config_file import (
    BROKER_CONF_KEYS,
    BrokerFileConfig,
    read_broker_config,
)
from rmqk.spi.commands import Command

__all__ = ["BROKER_COMMAND"]

T = TypeVar("T")

DEFAULT_DATA_DIR = "~/.rmqk/broker"


# ----------------------------------------------------------------------------- broker


def _broker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"store directory (default: {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--namesrv-port",
        type=int,
        default=9876,
        metavar="PORT",
        help="name server port (default: 9876)",
    )
    parser.add_argument(
        "--broker-port",
        type=int,
        default=10911,
        metavar="PORT",
        help="broker port (default: 10911)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="PORT",
        help="name server on PORT and broker on PORT+1; 0 picks two free ports and prints them",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="an Apache broker.conf (Java properties); the keys rmqk reads are "
        f"{', '.join(BROKER_CONF_KEYS)}; any other is an error; flags win over the file",
    )
    parser.add_argument("--broker-name", default=None, help="broker name (default: broker-a)")
    parser.add_argument("--cluster", default=None, help="cluster name (default: DefaultCluster)")
    parser.add_argument(
        "--advertised-host",
        default=None,
        help="host written into routes and message ids (default: --host)",
    )
    parser.add_argument(
        "--flush",
        choices=["async", "sync"],
        default="async",
        help="commit log flushing (default: async)",
    )
    parser.add_argument(
        "--delay-levels",
        default=None,
        metavar="LEVELS",
        help='delay levels, e.g. "1s 5s 10s" (default: Apache\'s 18 levels, 1s to 2h)',
    )
    parser.add_argument(
        "--no-auto-create-topic",
        dest="auto_create_topic",
        action="store_const",
        const=False,
        default=None,
        help="refuse sends to unknown topics (autoCreateTopicEnable=false)",
    )
    parser.add_argument(
        "--enable-property-filter",
        dest="enable_property_filter",
        action="store_const",
        const=True,
        default=None,
        help="let consumers subscribe by SQL92 over message properties "
        "(enablePropertyFilter; off by default, as in Apache)",
    )
    parser.add_argument(
        "--acl",
        default=None,
        metavar="FILE",
        help="check every request against this ACL file (.toml or .json with the keys of "
        "Apache's plain_acl.yml)",
    )
    parser.add_argument(
        "--tls-cert", default=None, metavar="PEM", help="serve TLS with this certificate chain"
    )
    parser.add_argument("--tls-key", default=None, metavar="PEM", help="the certificate's key")
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="PEM",
        help="CA that client certificates must chain to (with --tls-client-auth)",
    )
    parser.add_argument(
        "--tls-mode",
        choices=["enforcing", "permissive"],
        default="enforcing",
        help="enforcing: TLS only; permissive: TLS and plain on one port (default: enforcing)",
    )
    parser.add_argument(
        "--tls-client-auth",
        choices=["none", "optional", "require"],
        default="none",
        help="ask clients for a certificate (default: none)",
    )


def _broker_tls(args: argparse.Namespace) -> Any:
    from rmqk.plugins.broker.tls import ServerTlsConfig

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_ca is not None or args.tls_client_auth != "none":
            raise RmqkError("--tls-ca and --tls-client-auth need --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise RmqkError("TLS needs both --tls-cert and --tls-key")
    return ServerTlsConfig(
        cert_file=os.path.expanduser(args.tls_cert),
        key_file=os.path.expanduser(args.tls_key),
        ca_file=os.path.expanduser(args.tls_ca) if args.tls_ca else None,
        mode=args.tls_mode,
        client_auth=args.tls_client_auth,
    )


def _first(flag: T | None, from_file: T | None, default: T) -> T:
    """A flag given on the command line, else the config file's value, else the default."""
    if flag is not None:
        return flag
    return default if from_file is None else from_file


def _broker_run(args: argparse.Namespace) -> int:
    from rmqk.plugins.broker import EmbeddedBroker
    from rmqk.plugins.broker.store.index import IndexConfig

    namesrv_port, broker_port = args.namesrv_port, args.broker_port
    if args.port is not None:
        namesrv_port = args.port
        broker_port = 0 if args.port == 0 else args.port + 1
    conf = (
        read_broker_config(os.path.expanduser(args.config)) if args.config else BrokerFileConfig()
    )
    tx = _transaction_settings(conf)
    index = IndexConfig()  # the embedded broker's defaults, for keys the file leaves out
    broker = EmbeddedBroker(
        Path(os.path.expanduser(args.data)),
        host=args.host,
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        broker_name=_first(args.broker_name, conf.broker_name, "broker-a"),
        cluster=_first(args.cluster, conf.cluster, "DefaultCluster"),
        advertised_host=args.advertised_host,
        flush=args.flush,
        delay_levels=args.delay_levels,
        auto_create_topic=_first(args.auto_create_topic, conf.auto_create_topic, True),
        enable_property_filter=_first(
            args.enable_property_filter, conf.enable_property_filter, False
        ),
        acl=os.path.expanduser(args.acl) if args.acl else None,
        tls=_broker_tls(args),
        transaction_timeout=tx.timeout,
        transaction_check_max=tx.check_max,
        transaction_check_interval=tx.check_interval,
        message_index_enable=_first(None, conf.message_index_enable, index.enabled),
        max_hash_slot_num=_first(None, conf.max_hash_slot_num, index.max_hash_slot_num),
        max_index_num=_first(None, conf.max_index_num, index.max_index_num),
    )

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await broker.start()
        except OSError as exc:
            raise RmqkError(f"cannot start the broker: {exc}") from exc
        try:
            print(f"rmqk broker: name server listening on {broker.namesrv_addr}", flush=True)
            print(
                f"rmqk broker: broker {broker.broker_name} (cluster {broker.cluster}) "
                f"listening on {broker.broker_addr}",
                flush=True,
            )
            if broker.acl is not None:
                print(f"rmqk broker: ACL from {args.acl}", flush=True)
            if broker.tls is not None:
                print(f"rmqk broker: TLS ({broker.tls.mode}) on both ports", flush=True)
            if broker.enable_property_filter:
                print("rmqk broker: SQL92 filtering on (enablePropertyFilter=true)", flush=True)
            if not broker.index.enabled:
                print("rmqk broker: message index off (messageIndexEnable=false)", flush=True)
            print(f"rmqk broker: data in {broker.data_dir}; stop with Ctrl-C", flush=True)
            await stop.wait()
        finally:
            await broker.stop()
            print("rmqk broker: stopped", flush=True)

    asyncio.run(serve())
    return 0


BROKER_COMMAND = Command(
    help="run an embedded RocketMQ 4.9 name server and broker",
    run=_broker_run,
    add_arguments=_broker_args,
    description=(
        "Run a name server and a broker in one process, speaking the RocketMQ 4.9 "
        "remoting protocol and storing messages under --data."
    ),
    examples=(
        "rmqk broker",
        "rmqk broker --port 0 --data /tmp/rmqk",
        'rmqk broker --delay-levels "100ms 200ms 500ms" --no-auto-create-topic',
        "rmqk broker --acl plain_acl.toml --tls-cert server.crt --tls-key server.key",
        "rmqk broker --enable-property-filter",
        "rmqk broker --config broker.conf",
    ),
)


@attrs.frozen
class _TransactionSettings:
    timeout: float = 6.0
    check_max: int = 15
    check_interval: float = 60.0


def _transaction_settings(conf: BrokerFileConfig) -> _TransactionSettings:
    """broker.conf's transaction keys (Apache's milliseconds) in EmbeddedBroker's seconds;
    Apache's defaults (BrokerConfig) where the file names none."""
    default = _TransactionSettings()
    return _TransactionSettings(
        timeout=default.timeout
        if conf.transaction_timeout_ms is None
        else conf.transaction_timeout_ms / 1000,
        check_max=_first(None, conf.transaction_check_max, default.check_max),
        check_interval=default.check_interval
        if conf.transaction_check_interval_ms is None
        else conf.transaction_check_interval_ms / 1000,
    )

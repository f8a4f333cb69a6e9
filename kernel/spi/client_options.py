"""One client configuration (Java's ClientConfig) that every client kind takes.

:class:`ClientOptions` holds what decides how a client reaches its cluster and
who it is there: the name servers, namespace, client id parts, TLS with its CA
and certificates, ACL credentials, channels, timeouts and intervals, unit and
trace settings. The push and lite pull consumers' options extend it
(:class:`rmqk.options.ConsumerOptions` is a subclass), and the producers take
the same keyword names (or ``client_options=ClientOptions(...)``), so one
process can run clients against different clusters with different accounts:
every setting here is the client's own, not the process's.

Credentials given here sign that client's requests only; a client without them
is signed with the process defaults (the ``[acl]`` table or the ``RMQK_ACCESS_KEY``
and ``RMQK_SECRET_KEY`` environment variables, through the ``acl`` plugin). The
secret key and the security token are never shown: not in a repr, an error, a
log, ``rmqk check`` output or a status report.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.model.namespace import check_namespace
from rmqk.spi.option_text import unknown_key_message
from rmqk.spi.options import (
    JAVA_INT_MAX,
    OptionSpec,
    OptionType,
    Where,
    convert_values,
    option_specs,
)
from rmqk.spi.options import option as _option
from rmqk.spi.transport import Credentials, TlsConfig

__all__ = [
    "CLIENT_OPTIONS",
    "AccessChannel",
    "ClientOptions",
    "client_option_problems",
    "resolve_client_options",
]


class AccessChannel(enum.Enum):
    """ClientConfig.accessChannel: a private cluster or a cloud service."""

    LOCAL = "LOCAL"
    CLOUD = "CLOUD"


def _cpu_count() -> int:
    return os.cpu_count() or 1


@attrs.frozen
class ClientOptions:
    """How one client reaches its cluster (Java's ClientConfig, plus TLS files and ACL keys).

    Build it with keywords (``ClientOptions(namesrv_addr=..., use_tls=True)``): the
    values are checked at once, every problem named in one ConfigError. Every
    client kind takes these names as keyword options too, or the object as
    ``client_options=``. Each field carries its :class:`~rmqk.spi.options.OptionSpec`.
    """

    namesrv_addr: tuple[str, ...] = _option(
        OptionType.ADDRESSES,
        "Name server addresses (host:port), as one ';'-separated string like Java's "
        "or as a list. Required in a config file.",
        (),
        default_text="(none)",
        java_name="namesrvAddr",
    )
    instance_name: str = _option(
        OptionType.STR,
        "Instance name; with the client IP it forms the client id. In clustering mode "
        '"DEFAULT" becomes "<pid>#<nanotime>" at start, as in Java.',
        "DEFAULT",
        java_name="instanceName",
    )
    client_ip: str | None = _option(
        OptionType.STR,
        "The IP address put in the client id.",
        None,
        default_text="the machine's first non-loopback address",
        java_name="clientIP",
        nullable=True,
    )
    unit_name: str | None = _option(
        OptionType.STR,
        'Unit name, appended to the client id as "@unit_name".',
        None,
        default_text="(none)",
        java_name="unitName",
        nullable=True,
    )
    namespace: str | None = _option(
        OptionType.STR,
        "Namespace, as Java's NamespaceUtil applies it: with namespace ns1, topic T and group "
        "G are ns1%T and ns1%G on the wire, the group's retry and dead-letter topics "
        "%RETRY%ns1%G and %DLQ%ns1%G; system topics and groups stay bare. Listeners and "
        "results see the names without it. Letters, digits, underscore, hyphen and vertical "
        "bar only. Unset, a name server endpoint such as MQ_INST_1_abc.example.com:80 "
        "supplies it (MQ_INST_1_abc), as in Java.",
        None,
        default_text="(none)",
        java_name="namespace",
        nullable=True,
    )
    access_channel: AccessChannel = _option(  # noqa: RUF009
        OptionType.ENUM,
        "LOCAL for a private cluster, CLOUD for a cloud service. As in Java 4.9.8 it "
        "changes only message tracing (enable_msg_trace): CLOUD writes trace records to "
        "the region's trace topic (RMQ_SYS_TRACE_TOPIC_<region>) in the shorter cloud "
        "format; requests, topics and ACL signing are the same on both channels.",
        AccessChannel.LOCAL,
        java_name="accessChannel",
        enum_type=AccessChannel,
    )
    vip_channel_enabled: bool = _option(
        OptionType.BOOL,
        "Send requests to a broker's VIP channel, its listen port minus 2 (Java's "
        "MixAll.brokerVIPChannel), as Java 4.9.8 does: offset queries and commits, "
        "send-backs, queue locks, the group's member list, queue offset and time queries, "
        "and sends. Pulls, heartbeats and the client check stay on the main port.",
        False,
        java_name="vipChannelEnabled",
    )
    use_tls: bool = _option(
        OptionType.BOOL,
        "Use TLS on connections to name servers and brokers. The broker's certificate "
        "is verified against tls_ca_file, else the system CA store (which SSL_CERT_FILE "
        "and SSL_CERT_DIR can name), unless tls_verify is false.",
        False,
        java_name="useTLS",
    )
    tls_ca_file: str | None = _option(
        OptionType.PATH,
        "PEM file of the CA certificates this client trusts for the brokers' and name "
        "servers' certificates (Java's tls.client.trustCertPath). Needs use_tls.",
        None,
        default_text="(none: the system CA store)",
        nullable=True,
    )
    tls_cert_file: str | None = _option(
        OptionType.PATH,
        "PEM file of this client's certificate (and its key, unless tls_key_file is "
        "given), for brokers that require client certificates (Java's "
        "tls.client.certPath). Needs use_tls.",
        None,
        default_text="(none)",
        nullable=True,
    )
    tls_key_file: str | None = _option(
        OptionType.PATH,
        "PEM file of the key of tls_cert_file (Java's tls.client.keyPath). Needs tls_cert_file.",
        None,
        default_text="(none)",
        nullable=True,
    )
    tls_verify: bool = _option(
        OptionType.BOOL,
        "Verify the brokers' and name servers' certificates (chain and host name). false "
        "accepts any certificate, as Java's tls.client.authServer=false; the connection "
        "is then encrypted but not authenticated. Needs use_tls.",
        True,
    )
    access_key: str | None = _option(
        OptionType.STR,
        "ACL access key this client signs its requests with (Java's SessionCredentials "
        "through AclClientRPCHook). Unset, the process defaults sign: the [acl] table, "
        "else RMQK_ACCESS_KEY / RMQK_SECRET_KEY. Needs secret_key.",
        None,
        default_text="(none: the process defaults)",
        nullable=True,
    )
    secret_key: str | None = _option(
        OptionType.STR,
        "The secret key of access_key. Never shown in a repr, an error, a log or "
        "`rmqk check` output.",
        None,
        default_text="(none)",
        nullable=True,
        secret=True,
    )
    security_token: str | None = _option(
        OptionType.STR,
        "Security token sent with access_key (temporary credentials). Never shown.",
        None,
        default_text="(none)",
        nullable=True,
        secret=True,
    )
    hook_plugins: tuple[str, ...] | None = _option(
        OptionType.STR_LIST,
        "The plugins (by name, as `rmqk plugins` lists them) whose consume, send and "
        "filter hooks apply to this client; [] for none. Unset, every plugin's apply. "
        "Hooks registered on the client itself always apply. A name no plugin has is "
        "refused when the client is made.",
        None,
        default_text="(every plugin)",
        nullable=True,
    )
    unit_mode: bool = _option(
        OptionType.BOOL,
        "Unit mode, sent in heartbeats and pull requests.",
        False,
        java_name="unitMode",
    )
    enable_msg_trace: bool = _option(
        OptionType.BOOL,
        "Write a trace record of every consumed batch (SubBefore and SubAfter, Java's "
        "TraceDataEncoder format) to the trace topic, with a producer of its own; done by "
        "the trace plugin. Records that cannot be sent are dropped and counted, never "
        "waited for.",
        False,
        java_name="enableMsgTrace",
    )
    customized_trace_topic: str | None = _option(
        OptionType.STR,
        "The topic trace records go to when enable_msg_trace is on.",
        None,
        default_text="RMQ_SYS_TRACE_TOPIC",
        java_name="customizedTraceTopic",
        nullable=True,
    )
    client_callback_executor_threads: int = _option(
        OptionType.INT,
        "Threads that run response callbacks.",
        factory=_cpu_count,
        default_text="the number of CPUs",
        java_name="clientCallbackExecutorThreads",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="threads",
        compat_only=(
            "Java sizes NettyRemotingClient's public executor with it, the threads that run "
            "the callbacks of asynchronous requests (async pulls and sends); rmqk completes "
            "responses on its event loop, with no callback thread pool."
        ),
    )
    poll_name_server_interval: int = _option(
        OptionType.INT,
        "How often topic routes are refreshed from the name server.",
        30_000,
        java_name="pollNameServerInterval",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )
    heartbeat_broker_interval: int = _option(
        OptionType.INT,
        "How often heartbeats are sent to every broker.",
        30_000,
        java_name="heartbeatBrokerInterval",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )
    mq_client_api_timeout: int = _option(
        OptionType.INT,
        "Timeout of synchronous requests to name servers and brokers.",
        3_000,
        java_name="mqClientApiTimeout",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )

    def __attrs_post_init__(self) -> None:
        # Built directly (ClientOptions(use_tls=True, ...)), the values are checked here,
        # each against its spec, and stored converted ("a:1;b:2" becomes a tuple). A
        # consumer's options (a subclass) are checked by validate_options instead.
        if type(self) is not ClientOptions:
            return
        where = Where("<client options>", "ClientOptions")
        given = {
            s.name: getattr(self, s.attr)
            for s in CLIENT_OPTIONS
            if getattr(self, s.attr) != _default_of(s)
        }
        specs = {s.name: s for s in CLIENT_OPTIONS}
        values, problems = convert_values(specs, given, where)
        problems.extend(client_option_problems(values, given, where))
        if problems:
            raise ConfigError(problems)
        for name, value in values.items():
            object.__setattr__(self, specs[name].attr, value)

    # -- what the options make -------------------------------------------------------

    @property
    def tls(self) -> TlsConfig:
        """The TLS settings of this client's connections (off without use_tls)."""
        if not self.use_tls:
            return TlsConfig()
        return TlsConfig(
            enabled=True,
            ca_file=self.tls_ca_file,
            cert_file=self.tls_cert_file,
            key_file=self.tls_key_file,
            verify=self.tls_verify,
        )

    @property
    def credentials(self) -> Credentials | None:
        """This client's own ACL credentials, or None (the process defaults sign)."""
        if self.access_key is None or self.secret_key is None:
            return None
        return Credentials(self.access_key, self.secret_key, self.security_token)

    @property
    def client_options(self) -> ClientOptions:
        """Just the client options (of a consumer's options, say, for a producer to share)."""
        if type(self) is ClientOptions:
            return self
        return ClientOptions(**{spec.attr: getattr(self, spec.attr) for spec in CLIENT_OPTIONS})


def _default_of(spec: OptionSpec) -> Any:
    default: Any = attrs.fields_dict(ClientOptions)[spec.attr].default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory()
    return default


CLIENT_OPTIONS: tuple[OptionSpec, ...] = tuple(option_specs(ClientOptions).values())

_TLS_FILES = ("tls_ca_file", "tls_cert_file", "tls_key_file")


def client_option_problems(
    values: Mapping[str, Any], given: Mapping[str, Any], where: Where
) -> list[ConfigProblem]:
    """What is wrong with the combination of client options ``values`` (resolved).

    ``given`` is what the caller set, so a problem names a key the caller wrote.
    Nothing is accepted and ignored: a TLS file without use_tls, a CA file that
    nothing verifies against, half a pair of credentials are refused.
    """
    problems: list[ConfigProblem] = []
    namespace_problem = check_namespace(values.get("namespace"))
    if namespace_problem:
        problems.append(where.problem("namespace", namespace_problem))
    use_tls = values.get("use_tls", False)
    if not use_tls:
        # Only a setting that would change something counts: tls_verify = true (its
        # default) or a file of None says nothing without TLS.
        tls_set = [k for k in _TLS_FILES if values.get(k) is not None]
        if values.get("tls_verify") is False:
            tls_set.append("tls_verify")
        for key in tls_set:
            if key in given:
                problems.append(
                    where.problem(
                        key,
                        f"{key} is set but use_tls is false: TLS settings apply only to "
                        "TLS connections; set use_tls = true or remove it",
                    )
                )
    else:
        if values.get("tls_key_file") and not values.get("tls_cert_file"):
            problems.append(
                where.problem("tls_key_file", "tls_key_file is set but tls_cert_file is not")
            )
        if values.get("tls_ca_file") and values.get("tls_verify") is False:
            problems.append(
                where.problem(
                    "tls_ca_file",
                    "tls_ca_file is set but tls_verify is false: nothing would be verified "
                    "against it; remove one of them",
                )
            )
        for key in _TLS_FILES:
            path = values.get(key)
            if path and not os.path.isfile(path):
                problems.append(where.problem(key, f"{path!r} is not a readable file"))
    access, secret = values.get("access_key"), values.get("secret_key")
    if (access is None) != (secret is None):
        missing = "secret_key" if secret is None else "access_key"
        have = "access_key" if secret is None else "secret_key"
        problems.append(
            where.problem(missing, f"{have} is set but {missing} is not: give both or neither")
        )
    if values.get("security_token") is not None and access is None:
        problems.append(
            where.problem(
                "security_token", "security_token is set without access_key and secret_key"
            )
        )
    return problems


def resolve_client_options(
    client_options: ClientOptions | None, mapping: Mapping[str, Any], where: Where
) -> ClientOptions:
    """The client options of a client given ``client_options=`` or keyword options.

    One of the two: a client given both is refused, so that no keyword silently
    loses to (or overrides) the object. Unknown keys are refused with a suggestion.
    """
    if client_options is not None:
        if mapping:
            raise ConfigError(
                [
                    where.problem(
                        sorted(mapping)[0],
                        "pass either client_options=ClientOptions(...) or client keyword "
                        f"options, not both (got also {', '.join(sorted(mapping))})",
                    )
                ]
            )
        if not isinstance(client_options, ClientOptions):
            raise ConfigError(
                [
                    where.problem(
                        "client_options",
                        f"must be a ClientOptions, got {type(client_options).__name__}",
                    )
                ]
            )
        return client_options.client_options
    specs = {s.name: s for s in CLIENT_OPTIONS}
    values, problems = convert_values(specs, mapping, where, unknown=unknown_key_message)
    problems.extend(client_option_problems(values, mapping, where))
    if problems:
        raise ConfigError(problems)
    return ClientOptions(**{specs[k].attr: v for k, v in values.items()})

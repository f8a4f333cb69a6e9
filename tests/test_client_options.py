"""One client configuration (ClientOptions), per client and not per process.

Every client kind takes the same client keyword names; each client signs with its
own account and dials with its own TLS settings, so two consumers and a producer
of one process can use three accounts (and two clusters) at the same time.
Secrets never show. The brokers are the embedded broker over real TCP.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_acl_tls import _make_ca, _make_cert, server_tls
from test_faults_support import Tally, body_of, wait_until

import rmqk
from rmqk.app.config import describe_config, load_config
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.engine.sync import LitePullConsumer, Producer, PushConsumer, TransactionProducer
from rmqk.engine.transaction import AsyncTransactionProducer
from rmqk.model.errors import ConfigError, RmqkError
from rmqk.model.message import Message, MessageExt
from rmqk.pluginmanager import get_plugin_manager
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi.client_options import CLIENT_OPTIONS, AccessChannel, ClientOptions
from rmqk.spi.transport import Credentials, TransportConfig

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_acl_credentials")]

ADMIN = Credentials("co-admin", "admin-SECRET-7001")
ACCT_A = Credentials("co-acct-a", "a-SECRET-7002")
ACCT_B = Credentials("co-acct-b", "b-SECRET-7003")
ACCT_P = Credentials("co-acct-p", "p-SECRET-7004", "p-TOKEN-7005")
SECRETS = ["admin-SECRET-7001", "a-SECRET-7002", "b-SECRET-7003", "p-SECRET-7004", "p-TOKEN-7005"]

# Each account may use only its own topic (and the consumers their own group); the
# producer's may publish to both consumers' topics and read nothing.
ACL_TOML = f"""
globalWhiteRemoteAddresses = []

[[accounts]]
accessKey = "{ADMIN.access_key}"
secretKey = "{ADMIN.secret_key}"
admin = true

[[accounts]]
accessKey = "{ACCT_A.access_key}"
secretKey = "{ACCT_A.secret_key}"
defaultTopicPerm = "DENY"
defaultGroupPerm = "DENY"
topicPerms = ["TopicA=SUB"]
groupPerms = ["g-a=SUB"]

[[accounts]]
accessKey = "{ACCT_B.access_key}"
secretKey = "{ACCT_B.secret_key}"
defaultTopicPerm = "DENY"
defaultGroupPerm = "DENY"
topicPerms = ["TopicB=SUB"]
groupPerms = ["g-b=SUB"]

[[accounts]]
accessKey = "{ACCT_P.access_key}"
secretKey = "{ACCT_P.secret_key}"
defaultTopicPerm = "DENY"
defaultGroupPerm = "DENY"
topicPerms = ["TopicA=PUB", "TopicB=PUB"]
"""


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a secret shows in: {text[:300]!r}"


def keys_of(creds: Credentials) -> dict[str, Any]:
    """The client options that make a client sign as ``creds``."""
    token = {"security_token": creds.security_token} if creds.security_token else {}
    return {"access_key": creds.access_key, "secret_key": creds.secret_key, **token}


# ----------------------------------------------------------------------------- the options


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("not read before a connection is made\n")
        files[name] = str(tmp_path / name)
    return files


def every_option_set(files: dict[str, str]) -> dict[str, Any]:
    """A value other than the default for every client option."""
    values: dict[str, Any] = {
        "namesrv_addr": "127.0.0.1:19876;127.0.0.1:19877",
        "instance_name": "inst-x",
        "client_ip": "10.1.2.3",
        "unit_name": "unit-x",
        "namespace": "ns_x",
        "access_channel": "CLOUD",
        "vip_channel_enabled": True,
        "use_tls": True,
        "tls_ca_file": files["ca.pem"],
        "tls_cert_file": files["cert.pem"],
        "tls_key_file": files["key.pem"],
        "tls_verify": True,
        "access_key": ACCT_P.access_key,
        "secret_key": ACCT_P.secret_key,
        "security_token": ACCT_P.security_token,
        "unit_mode": True,
        "hook_plugins": ["prometheus", "trace"],
        "enable_msg_trace": True,
        "customized_trace_topic": "MyTrace",
        "client_callback_executor_threads": 3,
        "poll_name_server_interval": 1234,
        "heartbeat_broker_interval": 2345,
        "mq_client_api_timeout": 4567,
    }
    assert set(values) == {s.name for s in CLIENT_OPTIONS}, "a client option is not covered"
    return values


def test_every_client_kind_takes_every_client_option_by_the_same_name(
    pem_files: dict[str, str],
) -> None:
    values = every_option_set(pem_files)
    expected = ClientOptions(**values)
    assert expected.namesrv_addr == ("127.0.0.1:19876", "127.0.0.1:19877")
    assert expected.access_channel is AccessChannel.CLOUD
    kinds: list[Any] = [
        AsyncPushConsumer("g-x", **values),
        AsyncLitePullConsumer("g-x", **values),
        PushConsumer("g-x", **values),
        LitePullConsumer("g-x", **values),
    ]
    for consumer in kinds:
        options = consumer.options if hasattr(consumer, "options") else consumer._inner.options
        assert options.client_options == expected, type(consumer).__name__
    producers: list[Any] = [
        AsyncProducer("p-x", **values),
        AsyncTransactionProducer("p-x", **values),
        Producer("p-x", **values),
        TransactionProducer("p-x", **values),
        AsyncProducer("p-x", client_options=expected),
        # A producer given a consumer's client options: the same client, field for field.
        AsyncProducer("p-x", client_options=kinds[0].options.client_options),
    ]
    for producer in producers:
        inner = getattr(producer, "_inner", producer)
        assert inner.client_options == expected, type(producer).__name__
        assert inner.group == "ns_x%p-x"
    # The object and the keywords give the same client; a consumer's options carry one.
    assert kinds[0].options.client_options.credentials == ACCT_P
    assert expected.tls.enabled and expected.tls.ca_file == pem_files["ca.pem"]


def test_refused_combinations_name_the_key_and_why(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"tls_ca_file": str(ca)}, "tls_ca_file", "use_tls is false"),
        ({"tls_verify": False}, "tls_verify", "use_tls is false"),
        ({"use_tls": True, "tls_key_file": str(ca)}, "tls_key_file", "tls_cert_file is not"),
        (
            {"use_tls": True, "tls_ca_file": str(ca), "tls_verify": False},
            "tls_ca_file",
            "nothing would be verified",
        ),
        ({"use_tls": True, "tls_ca_file": str(tmp_path / "none")}, "tls_ca_file", "not a readable"),
        ({"access_key": "ak"}, "secret_key", "give both or neither"),
        ({"secret_key": "s-SECRET-7009"}, "access_key", "give both or neither"),
        ({"security_token": "tok"}, "security_token", "without access_key"),
        ({"namespace": "a%b"}, "namespace", "separator"),
    ]
    for values, key, why in cases:
        for make in (
            lambda v: ClientOptions(**v),
            lambda v: AsyncProducer("p-x", **v),
            lambda v: AsyncPushConsumer("g-x", **v),
            lambda v: AsyncLitePullConsumer("g-x", **v),
        ):
            with pytest.raises(ConfigError) as err:
                make(values)
            assert [p.key for p in err.value.problems] == [key], (values, err.value)
            assert why in str(err.value)
            assert "s-SECRET-7009" not in str(err.value)
    # A secret of the wrong type is refused without being shown.
    with pytest.raises(ConfigError) as err:
        AsyncProducer("p-x", access_key="ak", secret_key=12345678)
    assert "secret_key" in str(err.value) and "12345678" not in str(err.value)
    # Unknown keywords get a suggestion; an object and keywords together are refused.
    with pytest.raises(ConfigError, match=r"use_tsl.*use_tls"):
        AsyncProducer("p-x", use_tsl=True)
    with pytest.raises(ConfigError, match="either client_options"):
        AsyncProducer("p-x", client_options=ClientOptions(), use_tls=True)


def test_secrets_never_show_in_a_repr_or_rmqk_check(tmp_path: Path) -> None:
    options = ClientOptions(**keys_of(ACCT_P))
    producer = AsyncProducer("p-x", **keys_of(ACCT_P))
    consumer = AsyncPushConsumer("g-x", **keys_of(ACCT_A))
    shown = [repr(options), str(options), repr(producer.client_options), repr(consumer.options)]
    assert_no_secret(*shown)
    assert all("co-acct" in text for text in shown)  # the access key is not a secret
    path = tmp_path / "c.toml"
    path.write_text(
        "[consumers.c]\n"
        'group = "g-a"\n'
        'namesrv_addr = "127.0.0.1:9876"\n'
        'subscription = { TopicA = "*" }\n'
        'sink = "jsonl"\n'
        f'access_key = "{ACCT_A.access_key}"\n'
        f'secret_key = "{ACCT_A.secret_key}"\n'
        'security_token = "p-TOKEN-7005"\n'
        "[consumers.c.sink_options]\n"
        f'path = "{tmp_path / "out.jsonl"}"\n'
    )
    config = load_config(str(path))
    spec = config.consumers[0]
    assert spec.options.credentials == Credentials(
        ACCT_A.access_key, ACCT_A.secret_key, "p-TOKEN-7005"
    )
    text, as_json = describe_config(config), describe_config(config, as_json=True)
    assert_no_secret(text, as_json)
    assert "# secret_key = (set, not shown)" in text
    assert '"value": "(set, not shown)"' in as_json


# ----------------------------------------------------------------------------- ACL, per client


@pytest.fixture
async def acl_broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    path = tmp_path / "plain_acl.toml"
    path.write_text(ACL_TOML)
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0, acl=path) as b:
        yield b


async def create_topics_as_admin(broker: EmbeddedBroker, *topics: str) -> None:
    # The transport signs with the credentials of its own config: no process default.
    transport = TcpTransport(
        TransportConfig(
            namesrv_addrs=(broker.namesrv_addr,), client_id="127.0.0.1@co-admin", credentials=ADMIN
        ),
        get_plugin_manager().hook,
    )
    try:
        for topic in topics:
            await transport.create_topic(broker.broker_addr, topic, 2, 2, timeout_ms=3000)
        for topic in topics:
            await wait_until_route(transport, topic)
    finally:
        await transport.close()


async def wait_until_route(transport: TcpTransport, topic: str) -> None:
    for _ in range(100):
        if await transport.get_route(topic, 3000) is not None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"topic {topic} never reached the name server")


def recorder(name: str, tallies: dict[str, Tally], seen_topics: dict[str, set[str]]) -> Any:
    def record(msgs: list[MessageExt]) -> None:
        seen_topics[name].update(m.topic for m in msgs)
        tallies[name].record(msgs)

    return record


async def test_two_consumers_and_a_producer_each_with_its_own_account(
    acl_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = acl_broker
    await create_topics_as_admin(broker, "TopicA", "TopicB")
    tallies = {"a": Tally(), "b": Tally()}
    seen_topics: dict[str, set[str]] = {"a": set(), "b": set()}
    consumers = []
    for name, creds in (("a", ACCT_A), ("b", ACCT_B)):
        consumer = AsyncPushConsumer(
            f"g-{name}",
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            instance_name="shared-name",  # one client id: the accounts still stay apart
            access_key=creds.access_key,
            secret_key=creds.secret_key,
        )
        consumer.subscribe(f"Topic{name.upper()}")

        consumer.register_listener(recorder(name, tallies, seen_topics))
        consumers.append(consumer)
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        # Same client id, other accounts: each consumer has an instance of its own.
        assert consumers[0].client is not consumers[1].client
        assert consumers[0].client_id == consumers[1].client_id
        total = 60
        async with AsyncProducer(
            "p-acl",
            namesrv_addr=broker.namesrv_addr,
            access_key=ACCT_P.access_key,
            secret_key=ACCT_P.secret_key,
            security_token=ACCT_P.security_token,  # sent and signed with the request
        ) as producer:
            # A producer signing as consumer A's account is refused meanwhile: the
            # accounts are the clients', not the process's.
            intruder = AsyncProducer(
                "p-intruder",
                namesrv_addr=broker.namesrv_addr,
                retry_times_when_send_failed=0,
                **keys_of(ACCT_A),
            )
            await intruder.start()
            try:
                with pytest.raises(RmqkError, match="No default permission for topic:TopicB"):
                    await intruder.send(Message("TopicB", b"intruder"))
            finally:
                await intruder.shutdown()
            for i in range(total):
                await producer.send(Message("TopicA" if i % 2 else "TopicB", body_of(i)))
            await wait_until(
                lambda: tallies["a"].distinct + tallies["b"].distinct >= total, 30, "every message"
            )
    finally:
        await asyncio.gather(*(c.shutdown() for c in consumers))
    assert tallies["a"].distinct == tallies["a"].delivered == total // 2
    assert tallies["b"].distinct == tallies["b"].delivered == total // 2
    assert seen_topics == {"a": {"TopicA"}, "b": {"TopicB"}}
    assert "No accessKey is configured" not in caplog.text  # every request was signed
    assert_no_secret(caplog.text, *(repr(r.args) for r in caplog.records))


# ----------------------------------------------------------------------------- TLS, per client


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt; server.crt/key for IP 127.0.0.1; client.crt/key; other-ca.crt (untrusted)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test CA")
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "other-ca")
    _make_cert(
        d, "server", "ca",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )  # fmt: skip
    _make_cert(
        d, "client", "ca",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n",
    )  # fmt: skip
    return d


async def test_a_producer_with_use_tls_and_a_ca_file_publishes_to_a_tls_only_broker(
    pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing process-wide points at the test CA: only the client's tls_ca_file does.
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tls = server_tls(pki, ca_file=str(pki / "ca.crt"), client_auth="require")
    async with (
        EmbeddedBroker(tmp_path / "tls", namesrv_port=0, broker_port=0, tls=tls) as secure,
        EmbeddedBroker(tmp_path / "plain", namesrv_port=0, broker_port=0) as plain,
    ):
        client_tls = {
            "use_tls": True,
            "tls_ca_file": str(pki / "ca.crt"),
            "tls_cert_file": str(pki / "client.crt"),
            "tls_key_file": str(pki / "client.key"),
        }
        # One process, two clusters: TLS with a client certificate to one, plain to the other.
        async with (
            AsyncProducer("p-tls", namesrv_addr=secure.namesrv_addr, **client_tls) as over_tls,
            AsyncProducer("p-plain", namesrv_addr=plain.namesrv_addr) as over_plain,
        ):
            results = await asyncio.gather(
                *(over_tls.send(Message("TlsTopic", body_of(i))) for i in range(20)),
                *(over_plain.send(Message("PlainTopic", body_of(i))) for i in range(20)),
            )
        assert len(results) == 40
        assert sum(secure.store.max_offset("TlsTopic", q) for q in range(8)) == 20
        assert sum(plain.store.max_offset("PlainTopic", q) for q in range(8)) == 20
        # A push consumer with the same options reads them back over TLS.
        tally = Tally()
        consumer = AsyncPushConsumer(
            "g-tls",
            namesrv_addr=secure.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            **client_tls,
        )
        consumer.subscribe("TlsTopic")
        consumer.register_listener(tally.record)
        await consumer.start()
        try:
            await wait_until(lambda: tally.distinct >= 20, 30, "20 messages over TLS")
        finally:
            await consumer.shutdown()
        assert tally.distinct == 20
        # tls_verify = false: no CA at all, the broker's certificate is taken unchecked.
        async with AsyncProducer(
            "p-unverified",
            namesrv_addr=secure.namesrv_addr,
            use_tls=True,
            tls_verify=False,
            tls_cert_file=str(pki / "client.crt"),
            tls_key_file=str(pki / "client.key"),
        ) as unverified:
            await unverified.send(Message("TlsTopic", b"unverified"))
        assert sum(secure.store.max_offset("TlsTopic", q) for q in range(8)) == 21
        # Without its client certificate, trusting another CA, or verifying against the
        # system store (no CA file), the same producer fails and stores nothing.
        for wrong in (
            {"use_tls": True, "tls_ca_file": str(pki / "ca.crt")},
            {**client_tls, "tls_ca_file": str(pki / "other-ca.crt")},
            {
                "use_tls": True,
                "tls_cert_file": str(pki / "client.crt"),
                "tls_key_file": str(pki / "client.key"),
            },
        ):
            producer = AsyncProducer(
                "p-wrong", namesrv_addr=secure.namesrv_addr, send_msg_timeout=2000, **wrong
            )
            await producer.start()
            try:
                with pytest.raises(RmqkError):
                    await producer.send(Message("TlsTopic", b"refused"))
            finally:
                await producer.shutdown()
        assert sum(secure.store.max_offset("TlsTopic", q) for q in range(8)) == 21


def test_client_options_is_public() -> None:
    assert "ClientOptions" in rmqk.__all__
    assert rmqk.ClientOptions is ClientOptions


# ----------------------------------------------------------------------------- the admin client


def test_rmqk_admin_signs_and_uses_tls(
    pki: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    broker_thread_factory: Any,
) -> None:
    from rmqk.app.cli import main

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(ACL_TOML)
    broker = broker_thread_factory(tls=server_tls(pki), acl=acl_path)
    ns = broker.namesrv_addr
    create = ["admin", "topic", "create", "AdminMade", "-n", ns, "--timeout", "3"]
    tls = ["--tls", "--tls-ca-file", str(pki / "ca.crt")]
    # The account comes from the environment (the process default); TLS from the flags.
    monkeypatch.setenv("RMQK_ACCESS_KEY", ADMIN.access_key)
    monkeypatch.setenv("RMQK_SECRET_KEY", ADMIN.secret_key)
    assert main([*create, *tls]) == 0
    out, err = capsys.readouterr()
    assert "AdminMade" in out
    assert broker.broker.store.topics.get("AdminMade") is not None
    # Without TLS the TLS-only broker cannot be reached; with a non-admin account
    # the broker refuses; with a trace lookup the flags are refused, not ignored.
    assert main([*create]) != 0
    monkeypatch.setenv("RMQK_ACCESS_KEY", ACCT_A.access_key)
    monkeypatch.setenv("RMQK_SECRET_KEY", ACCT_A.secret_key)
    assert main(["admin", "topic", "create", "Denied", "-n", ns, *tls]) != 0
    assert broker.broker.store.topics.get("Denied") is None
    out, err = capsys.readouterr()
    assert "Need admin permission" in err
    assert_no_secret(out, err)
    # rmqk admin trace takes the same flags: its index queries and its reader both
    # connect over TLS and sign with the account (a traced send made over TLS).
    monkeypatch.setenv("RMQK_ACCESS_KEY", ADMIN.access_key)
    monkeypatch.setenv("RMQK_SECRET_KEY", ADMIN.secret_key)
    with Producer(
        "traced-pg",
        namesrv_addr=ns,
        enable_msg_trace=True,
        use_tls=True,
        tls_ca_file=str(pki / "ca.crt"),
        access_key=ADMIN.access_key,
        secret_key=ADMIN.secret_key,
    ) as producer:
        sent = producer.send(Message("AdminMade", b"traced over TLS"))
    trace = ["admin", "trace", sent.msg_id, "-n", ns, "--timeout", "3"]
    deadline = time.monotonic() + 30
    while True:
        code = main([*trace, *tls])
        out, err = capsys.readouterr()
        if code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the trace record is written by the producer's dispatcher
    assert code == 0, err
    assert out.splitlines()[2].split()[:2] == ["Pub", "traced-pg"], out
    assert main(trace) != 0  # the TLS-only broker refuses a plain connection
    assert_no_secret(*capsys.readouterr())
    # So does rmqk consume, as a reader and as a member of a group.
    consume = ["consume", "--namesrv", ns, "--topic", "AdminMade", "--from", "earliest"]
    for group in ([], ["--group", "tls-readers"]):
        assert main([*consume, "--count", "1", *group, *tls]) == 0
        out, err = capsys.readouterr()
        assert out == "traced over TLS\n", err
    assert_no_secret(out, err)


async def test_the_admin_client_takes_its_own_account_and_tls(
    pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqk.plugins.admin.admin_client import AdminClient

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(ACL_TOML)
    async with EmbeddedBroker(
        tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki), acl=acl_path
    ) as broker:
        async with AdminClient(
            broker.namesrv_addr,
            timeout=3,
            use_tls=True,
            tls_ca_file=str(pki / "ca.crt"),
            access_key=ADMIN.access_key,
            secret_key=ADMIN.secret_key,
        ) as admin:
            (master,) = await admin.masters()
            await admin.create_topic(
                master.master or "",
                "ByAdminClient",
                read_queues=2,
                write_queues=2,
                perm=6,
                order=False,
            )
        assert broker.store.topics.get("ByAdminClient") is not None
    # Options an admin client has no use for are refused by name.
    with pytest.raises(ConfigError, match="instance_name: an admin client does not use"):
        AdminClient("127.0.0.1:9876", instance_name="x")


# ----------------------------------------------------------------------------- instances


async def test_clients_share_an_instance_only_with_equal_settings(broker: EmbeddedBroker) -> None:
    ns = broker.namesrv_addr
    same = {"namesrv_addr": ns, "instance_name": "one-id"}
    first = AsyncProducer("p-one", **same)
    second = AsyncProducer("p-two", **same)
    other = AsyncProducer("p-three", **same, mq_client_api_timeout=2500)
    shared = AsyncProducer("p-four", client_options=other.client_options)
    for producer in (first, second, other, shared):
        await producer.start()
    try:
        assert first.client is second.client
        assert other.client is shared.client
        assert other.client is not first.client
        assert other.client.client_id == first.client.client_id
        # One group per client id, whatever the settings: a broker knows members by id.
        consumers = [
            AsyncPushConsumer("g-once", **same),
            AsyncPushConsumer("g-once", **same, heartbeat_broker_interval=5000),
        ]
        for consumer in consumers:
            consumer.subscribe("AnyTopic")
            consumer.register_listener(lambda msgs: None)
        await consumers[0].start()
        try:
            with pytest.raises(RmqkError, match=r"group\[g-once\] has been created before"):
                await consumers[1].start()
        finally:
            await consumers[0].shutdown()
    finally:
        for producer in (first, second, other, shared):
            await producer.shutdown()


# ----------------------------------------------------------------------------- per-client hooks


class Recorder:
    """A consume hook of one consumer: what it saw, before and after each batch."""

    def __init__(self) -> None:
        self.before: list[tuple[str, str, int]] = []
        self.after: list[tuple[str, bool | None]] = []

    def consume_message_before(self, context: Any) -> None:
        self.before.append((context.consumer_group, context.queue.topic, len(context.messages)))

    async def consume_message_after(self, context: Any) -> None:
        self.after.append((context.consumer_group, context.success))


async def test_a_consume_hook_registered_on_one_consumer_sees_only_its_batches(
    broker: EmbeddedBroker,
) -> None:
    ns = broker.namesrv_addr
    async with AsyncProducer("p-hooks", namesrv_addr=ns) as producer:
        for i in range(20):
            await producer.send(Message("HookA" if i % 2 else "HookB", body_of(i)))
    recorders = {"a": Recorder(), "b": Recorder()}
    tallies = {"a": Tally(), "b": Tally()}
    consumers = []
    for name, topic, service in (("a", "HookA", "concurrent"), ("b", "HookB", "orderly")):
        consumer = AsyncPushConsumer(
            f"g-hook-{name}",
            namesrv_addr=ns,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_service=service,
        )
        consumer.subscribe(topic)
        consumer.register_listener(tallies[name].record)
        assert consumer.register_consume_message_hook(recorders[name]) is recorders[name]
        consumers.append(consumer)
    with pytest.raises(RmqkError, match="neither consume_message_before"):
        consumers[0].register_consume_message_hook(object())
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        await wait_until(
            lambda: tallies["a"].distinct >= 10 and tallies["b"].distinct >= 10, 30, "both topics"
        )
        await wait_until(
            lambda: all(len(r.after) == len(r.before) for r in recorders.values()), 10, "afters"
        )
    finally:
        await asyncio.gather(*(c.shutdown() for c in consumers))
    for name, topic in (("a", "HookA"), ("b", "HookB")):
        seen = recorders[name]
        assert {(g, t) for g, t, _ in seen.before} == {(f"g-hook-{name}", topic)}
        assert sum(n for _, _, n in seen.before) == tallies[name].delivered == 10
        assert seen.after == [(f"g-hook-{name}", True)] * len(seen.before)


class SendRecorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []

    async def send_message_before(self, context: Any) -> None:
        self.seen.append(("before", context.producer_group, context.topic))

    def send_message_after(self, context: Any) -> None:
        ok = context.send_result is not None and context.exception is None
        self.seen.append(("after", context.producer_group, context.topic if ok else None))


async def test_a_send_hook_registered_on_one_producer_sees_only_its_sends(
    broker: EmbeddedBroker,
) -> None:
    ns = broker.namesrv_addr
    recorders = [SendRecorder(), SendRecorder()]
    async with (
        AsyncProducer("p-hook-1", namesrv_addr=ns) as first,
        AsyncProducer("p-hook-2", namesrv_addr=ns) as second,
    ):
        first.register_send_message_hook(recorders[0])
        second.register_send_message_hook(recorders[1])
        with pytest.raises(RmqkError, match="neither send_message_before"):
            first.register_send_message_hook(object())
        await asyncio.gather(
            *(first.send(Message("SendHook1", body_of(i))) for i in range(3)),
            *(second.send(Message("SendHook2", body_of(i))) for i in range(2)),
        )
    assert sorted(recorders[0].seen) == sorted(
        [("before", "p-hook-1", "SendHook1"), ("after", "p-hook-1", "SendHook1")] * 3
    )
    assert sorted(recorders[1].seen) == sorted(
        [("before", "p-hook-2", "SendHook2"), ("after", "p-hook-2", "SendHook2")] * 2
    )


# ----------------------------------------------------------------------------- trace


async def test_the_trace_producer_signs_as_its_traced_client(tmp_path: Path) -> None:
    from rmqk.plugins.remoting import acl as client_acl
    from rmqk.plugins.trace.lookup import find_trace_messages, trace_views

    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(
        ACL_TOML
        + """
[[accounts]]
accessKey = "co-acct-t"
secretKey = "t-SECRET-7006"
defaultTopicPerm = "DENY"
defaultGroupPerm = "DENY"
topicPerms = ["TraceOrders=PUB", "RMQ_SYS_TRACE_TOPIC=PUB"]
"""
    )
    async with EmbeddedBroker(tmp_path / "b", namesrv_port=0, broker_port=0, acl=acl_path) as b:
        await create_topics_as_admin(b, "TraceOrders", "RMQ_SYS_TRACE_TOPIC")
        # No process default: only the producer's own account can sign its traces.
        async with AsyncProducer(
            "p-traced",
            namesrv_addr=b.namesrv_addr,
            enable_msg_trace=True,
            access_key="co-acct-t",
            secret_key="t-SECRET-7006",
        ) as producer:
            sent = await producer.send(Message("TraceOrders", b"traced"))
        client_acl.configure(ADMIN)  # to read the trace topic back
        messages = await find_trace_messages([b.namesrv_addr], "RMQ_SYS_TRACE_TOPIC", sent.msg_id)
        (pub,) = [v.context for v in trace_views(sent.msg_id, messages)]
    assert pub.group_name == "p-traced"


# ----------------------------------------------------------------------------- status


def test_rmqk_status_reads_as_the_consumer_connects(
    pki: Path, tmp_path: Path, broker_thread_factory: Any
) -> None:
    import json
    import os

    from cli_support import jsonl_consumer, rmqk

    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(ACL_TOML)
    broker = broker_thread_factory(tls=server_tls(pki), acl=acl_path)
    ns = broker.namesrv_addr

    async def create() -> None:
        transport = TcpTransport(
            TransportConfig(
                namesrv_addrs=(ns,),
                client_id="127.0.0.1@co-admin",
                credentials=ADMIN,
                tls=ClientOptions(use_tls=True, tls_ca_file=str(pki / "ca.crt")).tls,
            ),
            get_plugin_manager().hook,
        )
        try:
            await transport.create_topic(broker.broker.broker_addr, "TopicA", 2, 2, timeout_ms=3000)
            await wait_until_route(transport, "TopicA")
        finally:
            await transport.close()

    asyncio.run(create())
    config = tmp_path / "status.toml"
    config.write_text(
        jsonl_consumer("watched", "g-a", ns, "TopicA", tmp_path / "out.jsonl")
        + "use_tls = true\n"
        + f'tls_ca_file = "{pki / "ca.crt"}"\n'
        + f'access_key = "{ACCT_A.access_key}"\n'
        + f'secret_key = "{ACCT_A.secret_key}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMQK_", "SSL_CERT"))}
    result = rmqk("status", str(config), "--json", env=env)
    # Nobody consumes yet (exit status 1), but the queues were read over TLS as account A.
    assert result.returncode == 1, result.stderr
    (status,) = json.loads(result.stdout)
    assert [(q["topic"], q["queue"]) for q in status["queues"]] == [("TopicA", 0), ("TopicA", 1)]
    assert "no consumer of group g-a is online" in status["problems"]
    assert_no_secret(result.stdout, result.stderr)


class DropMarked:
    """A filter hook of one consumer: drops the messages whose body starts with b"drop"."""

    def __init__(self) -> None:
        self.groups: set[str] = set()

    async def filter_message(self, context: Any) -> None:
        self.groups.add(context.consumer_group)
        context.messages[:] = [m for m in context.messages if not m.body.startswith(b"drop")]


def collector(into: list[bytes]) -> Any:
    def collect(msgs: list[MessageExt]) -> None:
        into.extend(bytes(m.body) for m in msgs)

    return collect


async def test_a_filter_hook_registered_on_one_consumer_filters_only_its_pulls(
    broker: EmbeddedBroker,
) -> None:
    ns = broker.namesrv_addr
    async with AsyncProducer("p-filter", namesrv_addr=ns) as producer:
        for i in range(10):
            body = b"drop-%d" % i if i % 2 else body_of(i)
            await producer.send(Message("FilterT", body))
    hook = DropMarked()
    bodies: dict[str, list[bytes]] = {"hooked": [], "plain": []}
    consumers = []
    for name in bodies:
        consumer = AsyncPushConsumer(
            f"g-filter-{name}", namesrv_addr=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        )
        consumer.subscribe("FilterT")
        consumer.register_listener(collector(bodies[name]))
        consumers.append(consumer)
    assert consumers[0].register_filter_message_hook(hook) is hook
    with pytest.raises(RmqkError, match="no filter_message"):
        consumers[1].register_filter_message_hook(object())
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        await wait_until(lambda: len(bodies["plain"]) >= 10, 30, "every message, unfiltered")
        await wait_until(lambda: len(bodies["hooked"]) >= 5, 30, "the unmarked messages")
        await asyncio.sleep(0.5)
    finally:
        await asyncio.gather(*(c.shutdown() for c in consumers))
    assert sorted(bodies["hooked"]) == sorted(body_of(i) for i in range(0, 10, 2))
    assert len(bodies["plain"]) == 10
    assert hook.groups == {"g-filter-hooked"}


async def test_a_filter_hook_on_a_lite_pull_consumer_filters_its_fetches(
    broker: EmbeddedBroker,
) -> None:
    ns = broker.namesrv_addr
    async with AsyncProducer("p-lite-filter", namesrv_addr=ns) as producer:
        for i in range(6):
            await producer.send(Message("LiteFilterT", b"drop-x" if i % 2 else body_of(i)))
    hook = DropMarked()
    consumer = AsyncLitePullConsumer(
        "g-lite-filter", namesrv_addr=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    consumer.subscribe("LiteFilterT")
    consumer.register_filter_message_hook(hook)
    await consumer.start()
    got: list[bytes] = []
    try:
        for _ in range(20):
            got.extend(bytes(m.body) for m in await consumer.poll(500))
            if len(got) >= 3:
                break
        got.extend(bytes(m.body) for m in await consumer.poll(500))
    finally:
        await consumer.shutdown()
    assert sorted(got) == sorted(body_of(i) for i in range(0, 6, 2))
    assert hook.groups == {"g-lite-filter"}


def test_the_blocking_twins_take_the_same_hooks() -> None:
    push, lite, producer = PushConsumer("g-twin"), LitePullConsumer("g-twin"), Producer("p-twin")
    consume, drop, send = Recorder(), DropMarked(), SendRecorder()
    assert push.register_consume_message_hook(consume) is consume
    assert push.register_filter_message_hook(drop) is drop
    assert lite.register_filter_message_hook(drop) is drop
    assert producer.register_send_message_hook(send) is send
    assert push._inner._consume_hooks == [consume]
    assert push._inner._filter_hooks == [drop] and lite._inner._filter_hooks == [drop]
    assert producer._inner.send_hooks == [send]


# ----------------------------------------------------------------------------- Spark source


async def test_the_spark_source_reads_over_tls_with_its_own_account(
    pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pyspark")
    from rmqk.plugins.spark.source import SourceOptions

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(ACL_TOML)
    async with EmbeddedBroker(
        tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki), acl=acl_path
    ) as broker:
        secure = {"use_tls": True, "tls_ca_file": str(pki / "ca.crt")}
        await create_topics_as_admin_tls(broker, secure, "TopicA")
        async with AsyncProducer(
            "p-spark", namesrv_addr=broker.namesrv_addr, **secure, **keys_of(ACCT_P)
        ) as producer:
            for i in range(5):
                await producer.send(Message("TopicA", body_of(i)))
        # Spark hands options over as text, its names case-insensitive.
        options = SourceOptions.parse(
            {
                "namesrv": broker.namesrv_addr,
                "topics": "TopicA",
                "consumerGroup": "g-a",
                "useTLS": "true",
                "tlsCaFile": str(pki / "ca.crt"),
                "accessKey": ACCT_A.access_key,
                "secretKey": ACCT_A.secret_key,
            },
            streaming=False,
        )
        assert options.client.credentials == ACCT_A
        assert_no_secret(repr(options))
        async with options.reader() as reader:
            queues = await reader.queues(options.topics)
            bodies = []
            for q in queues:
                end = await reader.max_offset(q)
                async for batch in reader.pull_range(q, 0, end):
                    bodies.extend(bytes(m.body) for m in batch)
        assert sorted(bodies) == sorted(body_of(i) for i in range(5))
    # The client options are checked as ClientOptions checks them, by their Spark names.
    with pytest.raises(ConfigError) as err:
        SourceOptions.parse(
            {"namesrv": "127.0.0.1:9876", "topics": "T", "tlsCaFile": str(pki / "ca.crt"),
             "secretKey": "s-SECRET-7009"},
            streaming=False,
        )  # fmt: skip
    assert {p.key for p in err.value.problems} == {"tlsCaFile", "accessKey"}
    assert "s-SECRET-7009" not in str(err.value)


async def create_topics_as_admin_tls(
    broker: EmbeddedBroker, tls_options: dict[str, Any], *topics: str
) -> None:
    transport = TcpTransport(
        TransportConfig(
            namesrv_addrs=(broker.namesrv_addr,),
            client_id="127.0.0.1@co-admin",
            credentials=ADMIN,
            tls=ClientOptions(**tls_options).tls,
        ),
        get_plugin_manager().hook,
    )
    try:
        for topic in topics:
            await transport.create_topic(broker.broker_addr, topic, 2, 2, timeout_ms=3000)
        for topic in topics:
            await wait_until_route(transport, topic)
    finally:
        await transport.close()


def test_rmqk_admin_dlq_connects_over_tls_as_its_flags_say(
    pki: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    broker_thread_factory: Any,
) -> None:
    """The dlq commands read and resend through a consumer and a producer of their own:
    those connect with the admin command's --tls flags too, not in plain text."""
    from rmqk.app.cli import main

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    broker = broker_thread_factory(tls=server_tls(pki))
    ns = broker.namesrv_addr
    tls = ["--tls", "--tls-ca-file", str(pki / "ca.crt")]
    create = ["admin", "topic", "create", "%DLQ%tls-group", "--perm", "6", "-n", ns]
    assert main([*create, "--timeout", "3", *tls]) == 0
    capsys.readouterr()
    assert main(["admin", "dlq", "list", "--group", "tls-group", "-n", ns, *tls]) == 0
    out, err = capsys.readouterr()
    assert out == "no dead letters for group tls-group\n", err


# ----------------------------------------------------------------- which hook plugins apply


FROM_FIRST: dict[str, Any] = {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}


class ProcessHooks:
    """A hook plugin of the process: every consume, send and filter hook it is called for."""

    def __init__(self) -> None:
        self.consumed: list[str] = []
        self.sent: list[str] = []
        self.filtered: list[str] = []

    @rmqk.hookimpl
    def rmqk_consume_message_before(self, context: Any) -> None:
        self.consumed.append(context.consumer_group)

    @rmqk.hookimpl
    def rmqk_send_message_before(self, context: Any) -> None:
        self.sent.append(context.producer_group)

    @rmqk.hookimpl
    def rmqk_filter_message(self, context: Any) -> None:
        self.filtered.append(context.consumer_group)


async def test_a_client_names_which_hook_plugins_apply(broker: EmbeddedBroker, pm: Any) -> None:
    """hook_plugins: [] leaves a client out of every plugin's hooks, a list names the
    ones that apply, unset is every plugin; the client's own hooks apply regardless."""
    ns = broker.namesrv_addr
    hooks = ProcessHooks()
    pm.register(hooks, name="audit")
    own = SendRecorder()
    async with (
        AsyncProducer("p-audited", namesrv_addr=ns) as audited,
        AsyncProducer("p-quiet", namesrv_addr=ns, hook_plugins=[]) as quiet,
        AsyncProducer("p-named", namesrv_addr=ns, hook_plugins=["audit"]) as named,
    ):
        quiet.register_send_message_hook(own)
        for k, producer in enumerate((audited, quiet, named)):
            for i in range(3):
                await producer.send(Message("HookPick", body_of(10 * k + i)))
    assert sorted(set(hooks.sent)) == ["p-audited", "p-named"]
    assert len(hooks.sent) == 6
    assert [s for s in own.seen if s[0] == "before"] == [("before", "p-quiet", "HookPick")] * 3

    tallies = {"all": Tally(), "none": Tally(), "lite": Tally()}
    push = {
        "all": AsyncPushConsumer("g-pick-all", namesrv_addr=ns, **FROM_FIRST),
        "none": AsyncPushConsumer("g-pick-none", namesrv_addr=ns, hook_plugins=[], **FROM_FIRST),
    }
    for name, consumer in push.items():
        consumer.subscribe("HookPick")
        consumer.register_listener(tallies[name].record)
    lite = AsyncLitePullConsumer("g-pick-lite", namesrv_addr=ns, hook_plugins=[], **FROM_FIRST)
    lite.subscribe("HookPick", "*")
    await asyncio.gather(*(c.start() for c in push.values()), lite.start())
    try:
        while tallies["lite"].distinct < 9:
            for msg in await lite.poll(500):
                tallies["lite"].record([msg])
        await wait_until(
            lambda: tallies["all"].distinct >= 9 and tallies["none"].distinct >= 9, 30, "both"
        )
    finally:
        await asyncio.gather(*(c.shutdown() for c in push.values()), lite.close())
    assert set(hooks.consumed) == {"g-pick-all"}
    assert set(hooks.filtered) == {"g-pick-all"}


def test_an_unknown_hook_plugin_is_refused_when_the_client_is_made(pm: Any) -> None:
    for make in (
        lambda: AsyncPushConsumer("g-typo", namesrv_addr="127.0.0.1:9876", hook_plugins=["tarce"]),
        lambda: AsyncLitePullConsumer("g-typo", namesrv_addr="127.0.0.1:9876", hook_plugins=["x"]),
        lambda: AsyncProducer("p-typo", namesrv_addr="127.0.0.1:9876", hook_plugins=["tarce"]),
    ):
        with pytest.raises(ConfigError, match="hook_plugins") as info:
            make()
        assert "no plugin is named" in str(info.value)
        assert "trace" in str(info.value) and "prometheus" in str(info.value)


def test_hook_plugins_in_a_consumer_file_as_docs_hooks_shows(tmp_path: Path) -> None:
    """docs/hooks.md's table, completed into a file: rmqk check shows the choice and
    refuses a name no plugin has, as the client itself would."""
    import re

    page = (Path(__file__).resolve().parent.parent / "docs" / "hooks.md").read_text()
    (block,) = [b for b in re.findall(r"^```toml\n(.*?)^```", page, re.M | re.S) if "hook_" in b]
    rest = 'namesrv_addr = "127.0.0.1:9876"\nsubscription = { Orders = "*" }\nsink = "jsonl"\n'
    rest += 'sink_options = { path = "out.jsonl" }\n'
    config = tmp_path / "c.toml"
    config.write_text(block + rest)
    (spec,) = load_config(config).consumers
    assert spec.options.hook_plugins == ("prometheus",)
    config.write_text(block.replace("prometheus", "prometheos") + rest)
    with pytest.raises(ConfigError, match="no plugin is named 'prometheos'"):
        load_config(config)

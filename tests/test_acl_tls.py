"""ACL and TLS on the embedded broker, against rmqk's own clients.

The broker checks every request as Apache's plain ACL does (access key, HMAC-SHA1
signature over the sorted header values and the body, per-topic and per-group
permissions, admin requests, white lists); rmqk's ``acl`` plugin signs. Wrong
credentials and denied resources get Apache's error and change nothing. TLS runs
on both ports with a throwaway CA made by the openssl command line. No secret
ever shows in a log record, an error or ``rmqk check`` output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from engine_support import admin_transport
from test_faults_support import Tally, body_of, wait_until

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.model import MessageQueue
from rmqk.model.errors import (
    BrokerError,
    ClientError,
    ConfigError,
    RemotingConnectError,
    RemotingError,
    RmqkError,
)
from rmqk.model.message import Message, MessageExt
from rmqk.pluginmanager import get_plugin_manager
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.broker.acl import (
    AccessValidator,
    AclAccount,
    AclConfig,
    load_acl_config,
)
from rmqk.plugins.broker.tls import ServerTlsConfig
from rmqk.plugins.remoting import acl as client_acl
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi.transport import TlsConfig, TransportConfig
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("no_acl_credentials")]

ADMIN = client_acl.Credentials("rmqk-admin", "admin-SECRET-0001")
USER = client_acl.Credentials("rmqk-user", "user-SECRET-0002")
LOCAL = client_acl.Credentials("rmqk-local", "local-SECRET-0003")
SECRETS = [c.secret_key for c in (ADMIN, USER, LOCAL)] + ["wrong-SECRET-0004"]
EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
MANAGER = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
AT_VALIDATE = f"{MANAGER}.validate(PlainPermissionManager.java:"

ACL_TOML = f"""
globalWhiteRemoteAddresses = []

[[accounts]]
accessKey = "{ADMIN.access_key}"
secretKey = "{ADMIN.secret_key}"
admin = true

[[accounts]]
accessKey = "{USER.access_key}"
secretKey = "{USER.secret_key}"
admin = false
defaultTopicPerm = "DENY"
defaultGroupPerm = "SUB"
topicPerms = ["Orders=PUB|SUB", "Secret=DENY", "PubOnly=PUB", "SubOnly=SUB"]
groupPerms = ["g-denied=DENY"]

[[accounts]]
accessKey = "{LOCAL.access_key}"
secretKey = "{LOCAL.secret_key}"
whiteRemoteAddress = "127.0.0.1"
"""


ACCOUNT = '[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "wrong-SECRET-0004"\n'


def acl_config(tmp_path: Path) -> AclConfig:
    path = tmp_path / "plain_acl.toml"
    path.write_text(ACL_TOML)
    return load_acl_config(path)


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a secret key shows in: {text[:300]!r}"


# ----------------------------------------------------------------------------- the validator


def signed(
    code: int, fields: dict[str, str], body: bytes = b"", creds: Any = USER
) -> RemotingCommand:
    request = RemotingCommand.request(code, fields)
    request.body = body
    client_acl.sign(request, creds)
    return request


def offset_query(group: str = "g1", topic: str = "Orders") -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": "0"}


def test_signature_is_checked_like_apache(tmp_path: Path) -> None:
    validator = AccessValidator(acl_config(tmp_path))
    request = signed(RequestCode.QUERY_CONSUMER_OFFSET, offset_query(), b"body")
    assert validator.check(request, "10.0.0.9:5555") is None
    # Any change to a signed value or the body breaks the signature.
    for change in ("field", "body", "signature", "missing"):
        bad = signed(RequestCode.QUERY_CONSUMER_OFFSET, offset_query(), b"body")
        if change == "field":
            bad.ext_fields["queueId"] = "1"
        elif change == "body":
            bad.body = b"Body"
        elif change == "signature":
            bad.ext_fields["Signature"] = "x" + bad.ext_fields["Signature"][1:]
        else:
            del bad.ext_fields["Signature"]
        denied = validator.check(bad, "10.0.0.9:5555")
        assert denied is not None, change
        assert denied.remark == (
            f"{EXCEPTION}Check signature failed for accessKey=rmqk-user, {AT_VALIDATE}684)"
        )
    # The unique-key query flag is not signed (Apache leaves it out of the content).
    request = signed(RequestCode.QUERY_CONSUMER_OFFSET, offset_query())
    request.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    assert validator.check(request, "10.0.0.9:5555") is None


def test_unknown_and_missing_access_keys(tmp_path: Path) -> None:
    validator = AccessValidator(acl_config(tmp_path))
    unsigned = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, offset_query())
    denied = validator.check(unsigned, "10.0.0.9:1")
    assert denied is not None
    assert denied.remark == f"{EXCEPTION}No accessKey is configured, {AT_VALIDATE}664)"
    stranger = client_acl.Credentials("nobody-at-all", "wrong-SECRET-0004")
    request = signed(RequestCode.QUERY_CONSUMER_OFFSET, offset_query(), creds=stranger)
    denied = validator.check(request, "10.0.0.9:1")
    assert denied is not None
    assert denied.remark == f"{EXCEPTION}No acl config for nobody-at-all, {AT_VALIDATE}668)"


def heartbeat_body(group: str, topics: list[str]) -> bytes:
    subs = [{"topic": t, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
             "classFilterMode": False, "expressionType": "TAG"} for t in topics]  # fmt: skip
    return json.dumps(
        {
            "clientID": "127.0.0.1@1",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": subs,
                    "unitMode": False,
                }
            ],
        }
    ).encode()


PULL = {"consumerGroup": "g1", "topic": "Orders", "queueId": "0", "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subVersion": "0"}  # fmt: skip


@pytest.mark.parametrize(
    ("code", "fields", "body", "denied"),
    [
        (RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "Orders"}, b"x", None),
        (RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "PubOnly"}, b"x", None),
        (RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "SubOnly"}, b"x", "topic:SubOnly@611"),
        (RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "Secret"}, b"x", "topic:Secret@611"),
        (RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "Unlisted"}, b"x", "topic:Unlisted@606"),
        (RequestCode.SEND_MESSAGE, {"group": "p", "topic": "Secret"}, b"x", "topic:Secret@611"),
        # A send to a retry topic needs SUB on the group, not PUB on the topic.
        (RequestCode.SEND_MESSAGE_V2, {"a": "g1", "b": "%RETRY%g1"}, b"x", None),
        (RequestCode.SEND_MESSAGE_V2, {"a": "g-denied", "b": "%RETRY%g-denied"}, b"x",
         "group:g-denied@611"),
        # Apache 4.9.8 checks no topic on batch sends.
        (RequestCode.SEND_BATCH_MESSAGE, {"a": "p", "b": "Secret"}, b"x", None),
        (RequestCode.PULL_MESSAGE, PULL, b"", None),
        (RequestCode.PULL_MESSAGE, {**PULL, "topic": "PubOnly"}, b"", "topic:PubOnly@611"),
        (RequestCode.PULL_MESSAGE, {**PULL, "consumerGroup": "g-denied"}, b"",
         "group:g-denied@611"),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {**offset_query(), "commitOffset": "5"}, b"", None),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {**offset_query(topic="Secret"), "commitOffset": "5"},
         b"", "topic:Secret@611"),
        (RequestCode.UPDATE_CONSUMER_OFFSET, offset_query(), b"", "<commitOffset> is null@134"),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g-denied", "offset": "1"}, b"",
         "group:g-denied@611"),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g-denied"}, b"",
         "group:g-denied@611"),
        (RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "g-denied"}, b"",
         "group:g-denied@611"),
        (RequestCode.HEART_BEAT, {}, heartbeat_body("g1", ["Orders"]), None),
        (RequestCode.HEART_BEAT, {}, heartbeat_body("g1", ["Orders", "Secret"]),
         "topic:Secret@611"),
        (RequestCode.HEART_BEAT, {}, heartbeat_body("g-denied", ["Orders"]),
         "group:g-denied@611"),
        (RequestCode.HEART_BEAT, {}, b"{not json", "bad HeartbeatData@134"),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "New"}, b"",
         "Need admin permission for request code=17, but accessKey=rmqk-user is not@581"),
        (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Orders"}, b"",
         "Need admin permission for request code=215, but accessKey=rmqk-user is not@581"),
        (RequestCode.GET_MAX_OFFSET, {"topic": "Secret", "queueId": "0"}, b"", None),
    ],
)  # fmt: skip
def test_permissions_per_request(
    tmp_path: Path, code: int, fields: dict[str, str], body: bytes, denied: str | None
) -> None:
    validator = AccessValidator(acl_config(tmp_path))
    result = validator.check(signed(code, dict(fields), body), "10.0.0.9:5555")
    if denied is None:
        assert result is None, result
        return
    assert result is not None
    what, _, line = denied.rpartition("@")
    assert what in result.message
    if what.startswith(("topic:", "group:")):
        assert result.message == f"No default permission for {what}"
    assert result.remark.startswith(EXCEPTION)
    assert result.remark.endswith(f".java:{line})")


def test_admin_account_may_do_everything_and_white_lists_skip_the_signature(
    tmp_path: Path,
) -> None:
    config = acl_config(tmp_path)
    validator = AccessValidator(config)
    for code, fields in (
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "New"}),
        (RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "Secret"}),
        (RequestCode.PULL_MESSAGE, {**PULL, "consumerGroup": "g-denied"}),
    ):
        assert validator.check(signed(code, fields, creds=ADMIN), "10.0.0.9:1") is None
    # rmqk-local may come from 127.0.0.1 with any signature, but not from elsewhere.
    wrong = client_acl.Credentials(LOCAL.access_key, "wrong-SECRET-0004")
    request = signed(RequestCode.QUERY_CONSUMER_OFFSET, offset_query(), creds=wrong)
    assert validator.check(request, "127.0.0.1:40000") is None
    assert validator.check(request, "127.0.0.2:40000") is not None
    # A global white list lets everything from its addresses through, even unsigned.
    open_config = AclConfig(config.accounts, ("10.1.*.*", "192.168.0.{1,2}", "172.16.0.10-20"))
    validator = AccessValidator(open_config)
    unsigned = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"})
    for host, allowed in (
        ("10.1.200.3", True), ("10.2.0.1", False), ("192.168.0.2", True), ("192.168.0.3", False),
        ("172.16.0.15", True), ("172.16.0.21", False),
    ):  # fmt: skip
        assert (validator.check(unsigned, f"{host}:9") is None) is allowed, host


def test_acl_files_toml_and_json(tmp_path: Path) -> None:
    from_toml = acl_config(tmp_path)
    json_path = tmp_path / "plain_acl.json"
    json_path.write_text(
        json.dumps(
            {
                "accounts": [
                    {"accessKey": a.access_key, "secretKey": a.secret_key, "admin": a.admin,
                     "whiteRemoteAddress": a.white_remote_address,
                     "defaultTopicPerm": a.default_topic_perm,
                     "defaultGroupPerm": a.default_group_perm,
                     "topicPerms": list(a.topic_perms), "groupPerms": list(a.group_perms)}
                    for a in from_toml.accounts
                ],
                "globalWhiteRemoteAddresses": [],
            }
        )
    )  # fmt: skip
    assert load_acl_config(json_path) == from_toml
    assert [a.access_key for a in from_toml.accounts] == ["rmqk-admin", "rmqk-user", "rmqk-local"]
    assert_no_secret(repr(from_toml), str(from_toml))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "short"\n',
         "[accounts[0]] secretKey: must be a string longer than 6 characters"),
        ('[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "wrong-SECRET-0004"\n'
         'defaultTopicPerm = "ALL"\n', "defaultTopicPerm: must be one of PUB, SUB, PUB|SUB, DENY"),
        ('[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "wrong-SECRET-0004"\n'
         'topicPerms = ["T:PUB"]\n', "'T:PUB' is not resource=PERM"),
        ('[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "wrong-SECRET-0004"\n'
         'whiteRemoteAddress = "1.2.3.999"\n', "whiteRemoteAddress: bad address pattern"),
        ('[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "wrong-SECRET-0004"\n'
         'secretkey = "wrong-SECRET-0004"\n', "secretkey: unknown key"),
        ('accounts = 3\n', "accounts: must be a list of tables"),
        ('[[accounts]]\naccessKey = "ak-long-enough"\nsecretKey = "wrong-SECRET-0004" x\n',
         "invalid TOML (at line 3"),
    ],
)  # fmt: skip
def test_acl_file_errors_name_the_key_and_hide_the_secret(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "acl.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_acl_config(path)
    message = str(err.value)
    assert expected in message
    assert str(path) in message
    assert_no_secret(message)
    with pytest.raises(ConfigError, match=r"must be \.toml or \.json"):
        load_acl_config(tmp_path / "plain_acl.yml")


# ----------------------------------------------------------------------------- over TCP


@pytest.fixture
async def acl_broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    path = tmp_path / "plain_acl.toml"
    path.write_text(ACL_TOML)
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0, acl=path) as b:
        yield b


async def create_topic_as(broker: EmbeddedBroker, topic: str, creds: Any) -> None:
    client_acl.configure(creds)
    transport = await admin_transport(broker.namesrv_addr)
    try:
        await transport.create_topic(broker.broker_addr, topic, 2, 2)
    finally:
        await transport.close()


async def send_one(broker: EmbeddedBroker, topic: str, body: bytes = b"x") -> None:
    async with AsyncProducer("acl-producer", namesrv_addr=broker.namesrv_addr) as producer:
        await producer.send(Message(topic, body))


def stored(broker: EmbeddedBroker, topic: str) -> int:
    return sum(broker.store.max_offset(topic, q) for q in range(8))


async def test_acl_end_to_end(
    acl_broker: EmbeddedBroker, all_logs: pytest.LogCaptureFixture
) -> None:
    broker = acl_broker
    errors: list[str] = []

    # A non-admin cannot create topics; nothing is created.
    with pytest.raises(BrokerError) as err:
        await create_topic_as(broker, "Orders", USER)
    assert err.value.code == ResponseCode.SYSTEM_ERROR
    assert "Need admin permission for request code=17, but accessKey=rmqk-user is not" in str(
        err.value
    )
    errors.append(str(err.value))
    assert broker.store.topics.get("Orders") is None
    for topic in ("Orders", "PubOnly", "Secret"):
        await create_topic_as(broker, topic, ADMIN)

    # The user sends and consumes Orders; counts end to end.
    client_acl.configure(USER)
    total = 200
    async with AsyncProducer("acl-producer", namesrv_addr=broker.namesrv_addr) as producer:
        for i in range(total):
            await producer.send(Message("Orders", body_of(i)))
    tally = Tally()
    consumer = AsyncPushConsumer(
        "g-acl", namesrv_addr=broker.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    consumer.subscribe("Orders")

    @consumer.register_listener
    def handle(msgs: list[MessageExt]) -> None:
        tally.record(msgs)

    await consumer.start()
    try:
        await wait_until(lambda: tally.distinct >= total, 30, "every order")
        await asyncio.sleep(0.3)
    finally:
        await consumer.shutdown()
    assert tally.distinct == tally.delivered == total

    # Wrong secret, unknown key, no credentials: refused with Apache's remark, nothing stored.
    before = stored(broker, "Orders")
    cases = [
        (client_acl.Credentials(USER.access_key, "wrong-SECRET-0004"),
         "Check signature failed for accessKey=rmqk-user"),
        (client_acl.Credentials("nobody-at-all", "wrong-SECRET-0004"),
         "No acl config for nobody-at-all"),
        (None, "No accessKey is configured"),
    ]  # fmt: skip
    for creds, why in cases:
        client_acl.configure(creds)
        # SYSTEM_ERROR is retried (as Java does), then the send fails with the remark.
        with pytest.raises(RmqkError) as failure:
            await send_one(broker, "Orders")
        errors.append(str(failure.value))
        assert why in str(failure.value)
    assert stored(broker, "Orders") == before

    # Denied topics: no send stored, no topic auto-created.
    client_acl.configure(USER)
    for topic in ("Secret", "NotListed"):
        with pytest.raises(RmqkError) as failure:
            await send_one(broker, topic)
        assert f"No default permission for topic:{topic}" in str(failure.value)
        errors.append(str(failure.value))
    assert stored(broker, "Secret") == 0
    assert broker.store.topics.get("NotListed") is None

    # A denied group consumes nothing and commits nothing, and says why in the log.
    await send_one(broker, "PubOnly")
    denied_tally = Tally()
    denied = AsyncPushConsumer(
        "g-denied", namesrv_addr=broker.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    denied.subscribe("Orders")
    denied.register_listener(denied_tally.record)
    await denied.start()
    try:
        await wait_until(
            lambda: "No default permission for group:g-denied" in all_logs.text, 15, "the refusal"
        )
        await asyncio.sleep(1.0)
    finally:
        await denied.shutdown()
    assert denied_tally.delivered == 0
    offsets = broker.store.consumer_offsets
    assert all(offsets.query_offset("g-denied", "Orders", q) == -1 for q in range(2))

    # The white-listed account passes from 127.0.0.1 whatever its signature.
    client_acl.configure(client_acl.Credentials(LOCAL.access_key, "wrong-SECRET-0004"))
    await send_one(broker, "Orders", b"from-localhost")
    assert stored(broker, "Orders") == before + 1

    assert_no_secret(all_logs.text, *errors, *(repr(r.args) for r in all_logs.records))


async def test_broker_refuses_to_start_with_a_bad_acl_file(tmp_path: Path) -> None:
    path = tmp_path / "acl.toml"
    path.write_text(ACCOUNT + 'admin = "yes"\n')
    broker = EmbeddedBroker(tmp_path / "b", namesrv_port=0, broker_port=0, acl=path)
    with pytest.raises(ConfigError, match="admin: must be true or false") as err:
        await broker.start()
    assert_no_secret(str(err.value))
    assert not broker.running


def test_cli_broker_acl_error_and_check_output_hide_secrets(tmp_path: Path) -> None:
    acl_file = tmp_path / "acl.toml"
    acl_file.write_text(ACCOUNT + 'topicPerms = ["T"]\n')
    run = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "broker", "--port", "0", "--data", str(tmp_path / "d"),
         "--acl", str(acl_file)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode != 0
    assert "'T' is not resource=PERM" in run.stderr
    assert_no_secret(run.stdout, run.stderr)

    config = tmp_path / "consumers.toml"
    config.write_text(
        f'[acl]\naccess_key = "{USER.access_key}"\nsecret_key = "{USER.secret_key}"\n\n'
        '[consumers.orders]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:9876"\n'
        'subscription = { Orders = "*" }\nsink = "jsonl"\n'
        'sink_options = { path = "out.jsonl" }\n'
    )
    for extra in ([], ["--json"], ["--log-level", "DEBUG"]):
        run = subprocess.run(
            [sys.executable, "-m", "rmqk.cli", "check", str(config), *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "orders" in run.stdout
        assert_no_secret(run.stdout, run.stderr)
    config.write_text(config.read_text().replace("secret_key", "secret_keyy"))
    run = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "check", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode != 0
    assert "secret_keyy: unknown key" in run.stdout + run.stderr
    assert_no_secret(run.stdout, run.stderr)


def test_secret_never_in_a_repr() -> None:
    account = AclAccount("ak-long-enough", "wrong-SECRET-0004")
    assert_no_secret(repr(account), repr(AclConfig((account,))), str(account))


# ----------------------------------------------------------------------------- TLS


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN=rmqk {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip


def _make_cert(d: Path, name: str, ca: str, ext: str) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip
    (d / f"{name}.ext").write_text(ext + "authorityKeyIdentifier=keyid,issuer\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


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


def server_tls(pki: Path, **options: Any) -> ServerTlsConfig:
    return ServerTlsConfig(str(pki / "server.crt"), str(pki / "server.key"), **options)


async def route_via(broker: EmbeddedBroker, tls: TlsConfig) -> object:
    transport = TcpTransport(
        TransportConfig(namesrv_addrs=(broker.namesrv_addr,), client_id="127.0.0.1@tls", tls=tls)
    )
    try:
        await transport.create_topic(broker.broker_addr, "TlsTopic", 1, 1, timeout_ms=3000)
        return await transport.get_max_offset(
            broker.broker_addr, MessageQueue("TlsTopic", broker.broker_name, 0), 3000
        )
    finally:
        await transport.close()


async def test_tls_enforcing_refuses_plain_and_unknown_ca(pki: Path, tmp_path: Path) -> None:
    async with EmbeddedBroker(
        tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki)
    ) as broker:
        assert await route_via(broker, TlsConfig(enabled=True, ca_file=str(pki / "ca.crt"))) == 0
        with pytest.raises(RemotingError):
            await route_via(broker, TlsConfig())  # plain bytes on a TLS port
        with pytest.raises(RemotingConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await route_via(broker, TlsConfig(enabled=True, ca_file=str(pki / "other-ca.crt")))


async def test_tls_permissive_takes_both_on_one_port(pki: Path, tmp_path: Path) -> None:
    async with EmbeddedBroker(
        tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki, mode="permissive")
    ) as broker:
        assert await route_via(broker, TlsConfig()) == 0
        assert await route_via(broker, TlsConfig(enabled=True, ca_file=str(pki / "ca.crt"))) == 0


async def test_tls_client_certificates(pki: Path, tmp_path: Path) -> None:
    tls = server_tls(pki, ca_file=str(pki / "ca.crt"), client_auth="require")
    async with EmbeddedBroker(tmp_path / "b", namesrv_port=0, broker_port=0, tls=tls) as broker:
        with pytest.raises(RemotingError):
            await route_via(broker, TlsConfig(enabled=True, ca_file=str(pki / "ca.crt")))
        with_cert = TlsConfig(
            enabled=True,
            ca_file=str(pki / "ca.crt"),
            cert_file=str(pki / "client.crt"),
            key_file=str(pki / "client.key"),
        )
        assert await route_via(broker, with_cert) == 0


def test_tls_bad_files_are_config_errors(pki: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cert_file"):
        ServerTlsConfig(str(tmp_path / "none.crt"), str(pki / "server.key")).ssl_context()
    with pytest.raises(ConfigError, match="needs a ca_file"):
        server_tls(pki, client_auth="require").ssl_context()
    with pytest.raises(ConfigError, match=r"\[tls\] mode: must be one of"):
        server_tls(pki, mode="sometimes").ssl_context()


async def test_tls_and_acl_end_to_end(
    pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, all_logs: pytest.LogCaptureFixture
) -> None:
    """A consumer with use_tls and credentials, against a broker enforcing both."""
    # use_tls verifies against the default CA store; point it at the test CA.
    monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.crt"))
    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(ACL_TOML)
    async with EmbeddedBroker(
        tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki), acl=acl_path
    ) as broker:
        client_acl.configure(ADMIN)
        admin = TcpTransport(
            TransportConfig(
                namesrv_addrs=(broker.namesrv_addr,),
                client_id="127.0.0.1@tls-admin",
                tls=TlsConfig(enabled=True),
            ),
            get_plugin_manager().hook,
        )
        try:
            await admin.create_topic(broker.broker_addr, "Orders", 2, 2, timeout_ms=3000)
        finally:
            await admin.close()
        client_acl.configure(USER)
        tally = Tally()
        consumer = AsyncPushConsumer(
            "g-tls",
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            use_tls=True,
        )
        consumer.subscribe("Orders")
        consumer.register_listener(tally.record)
        await consumer.start()
        try:
            # The producer shares the consumer's TLS client (AsyncProducer has no use_tls).
            producer = AsyncProducer("tls-producer")
            await producer.start(client=consumer.client)
            try:
                for i in range(100):
                    await producer.send(Message("Orders", body_of(i)))
            finally:
                await producer.shutdown()
            await wait_until(lambda: tally.distinct >= 100, 30, "100 messages over TLS")
            await asyncio.sleep(0.3)
        finally:
            await consumer.shutdown()
        assert tally.distinct == tally.delivered == 100
    assert_no_secret(all_logs.text)


def test_the_spark_source_reads_over_tls_and_signs_its_requests(
    pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, all_logs: pytest.LogCaptureFixture
) -> None:
    """The source's range reader with useTLS and credentials, against a broker enforcing both."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from rmqk.engine.reader import RangeReader, ReaderSettings
    from rmqk.plugins.spark.source import RocketMQBatchReader, SourceOptions

    monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.crt"))
    acl_path = tmp_path / "plain_acl.toml"
    acl_path.write_text(ACL_TOML)
    handle = EmbeddedBroker.run_in_thread(
        tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki), acl=acl_path
    )
    ns = handle.namesrv_addr
    try:

        async def fill() -> None:
            client_acl.configure(ADMIN)
            admin = TcpTransport(
                TransportConfig(
                    namesrv_addrs=(ns,), client_id="127.0.0.1@tls-admin", tls=TlsConfig(True)
                ),
                get_plugin_manager().hook,
            )
            try:
                await admin.create_topic(handle.broker_addr, "Orders", 2, 2, timeout_ms=3000)
            finally:
                await admin.close()
            client_acl.configure(USER)
            # A producer on a reader's client: the TLS client the reader builds sends too.
            async with RangeReader.open(ReaderSettings([ns], use_tls=True)) as reader:
                producer = AsyncProducer("tls-producer")
                await producer.start(client=reader.client)
                try:
                    for i in range(30):
                        await producer.send(Message("Orders", body_of(i)))
                finally:
                    await producer.shutdown()

        asyncio.run(fill())

        def rows(**options: str) -> list[dict[str, Any]]:
            given = {"namesrv": ns, "topics": "Orders", "pullTimeoutMs": "3000", **options}
            reader = RocketMQBatchReader(SourceOptions.parse(given, streaming=False))
            return [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]

        # Credentials from the environment, as a Spark executor gets them.
        client_acl.configure(None)
        monkeypatch.setenv("RMQK_ACCESS_KEY", USER.access_key)
        monkeypatch.setenv("RMQK_SECRET_KEY", USER.secret_key)
        assert sorted(r["body"] for r in rows(useTLS="true")) == [body_of(i) for i in range(30)]
        with pytest.raises(ClientError, match=r"no name server answers.*connection"):
            rows()  # plain bytes on a TLS port
        monkeypatch.delenv("RMQK_ACCESS_KEY")
        monkeypatch.delenv("RMQK_SECRET_KEY")
        with pytest.raises(BrokerError, match="No accessKey"):
            rows(useTLS="true")
    finally:
        client_acl.configure(None)
        handle.stop()
    assert_no_secret(all_logs.text)

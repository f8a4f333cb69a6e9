"""The embedded broker's message index over real TCP: QUERY_MESSAGE and VIEW_MESSAGE_BY_ID as
Apache answers them, lookups by unique id, offset id and key surviving restarts and kills,
and `rmqk admin message` (issue 17 #3)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_broker_support import RawClient, messages_of
from test_faults_support import BrokerProcess

from rmqk.app.cli import main
from rmqk.engine.producer import AsyncProducer
from rmqk.model import SendResult
from rmqk.model.errors import RmqkError
from rmqk.model.message import Message, decode_offset_msg_id, format_properties, offset_msg_id
from rmqk.plugins.admin.admin_client import LONG_MAX, AdminClient, MessageIdKind
from rmqk.plugins.broker import connection
from rmqk.plugins.broker.config_file import BrokerFileConfig, read_broker_config
from rmqk.plugins.broker.store import MessageStore
from rmqk.plugins.broker.store.index import IndexConfig
from rmqk.plugins.broker.store.index_file import java_string_hash
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
# A tiny index: every key shares one of three slots and files roll every 15 entries.
TINY = {"max_hash_slot_num": 3, "max_index_num": 16}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _send(namesrv: str, topic: str, keys: list[str | None]) -> list[SendResult]:
    out = []
    async with AsyncProducer("index-producer", namesrv_addr=namesrv) as producer:
        for i, key in enumerate(keys):
            out.append(await producer.send(Message(topic, f"body-{i}".encode(), keys=key)))
    return out


async def _query(
    addr: str, topic: str, key: str, *, max_num: int = 64, begin: int = 0, end: int = LONG_MAX,
    **extra: object,
) -> Any:  # fmt: skip
    client = await RawClient.connect(addr)
    try:
        fields = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin,
                  "endTimestamp": end, **extra}  # fmt: skip
        return await client.call(RequestCode.QUERY_MESSAGE, fields)
    finally:
        await client.close()


async def _check_lookups(namesrv: str, topic: str, sent: list[SendResult], keys: list[str]) -> None:
    """Every message is found by its unique id, by its offset id and by each of its keys.

    ``keys[i]`` is the KEYS property message ``i`` was sent with.
    """
    async with AdminClient(namesrv) as admin:
        for i, result in enumerate(sent):
            kind, message = await admin.find_message(result.msg_id, topic=topic)
            assert kind is MessageIdKind.UNIQUE
            assert (message.body, message.msg_id) == (f"body-{i}".encode(), result.msg_id)
            kind, message = await admin.find_message(result.offset_msg_id)
            assert kind is MessageIdKind.OFFSET
            assert (message.body, message.offset_msg_id) == (
                f"body-{i}".encode(),
                result.offset_msg_id,
            )
        for key in {k for text in keys for k in text.split()}:
            found = await admin.query_by_key(topic, key)
            expected = [r.msg_id for r, text in zip(sent, keys, strict=True) if key in text.split()]
            assert sorted(m.msg_id for m in found.messages) == sorted(expected), key
            assert found.index_last_update_timestamp > 0


# ----------------------------------------------------------------------- restarts


async def test_lookups_by_each_kind_of_id_and_by_key_after_a_restart(broker_factory, tmp_path):
    data, port = tmp_path / "restart", _free_port()
    keys = [f"order-{i % 4} all" for i in range(24)]
    first = await broker_factory(data_dir=data, broker_port=port, **TINY)
    sent = await _send(first.namesrv_addr, "Indexed", list(keys))
    await _check_lookups(first.namesrv_addr, "Indexed", sent, keys)
    await first.stop()

    second = await broker_factory(data_dir=data, broker_port=port, **TINY)
    assert second.store.index.reindexed == 0  # a clean stop flushed the whole index
    assert len(list((data / "index").iterdir())) > 3  # it rolled over several files
    await _check_lookups(second.namesrv_addr, "Indexed", sent, keys)
    # New messages are indexed after the restart as well.
    more = await _send(second.namesrv_addr, "Indexed", ["order-1 all"])
    async with AdminClient(second.namesrv_addr) as admin:
        found = await admin.query_by_key("Indexed", "order-1")
        assert len((await admin.query_by_key("Indexed", "all")).messages) == 25
    assert more[0].msg_id in {m.msg_id for m in found.messages}
    assert len(found.messages) == 7


async def test_an_index_that_was_never_flushed_is_rebuilt_from_the_commit_log(
    broker_factory, tmp_path
):
    data, port = tmp_path / "live", _free_port()
    first = await broker_factory(data_dir=data, broker_port=port, **TINY)
    flushed = await _send(first.namesrv_addr, "Unflushed", ["k-a all", "k-b all"])
    first.store.flush()
    # Stop the store's flush thread: what follows reaches the files (the page cache)
    # but no index checkpoint vouches for it, as when a process dies between flushes.
    store = first.store
    store._stop_flusher.set()
    store._flusher.join()
    late = await _send(first.namesrv_addr, "Unflushed", ["k-a all", "k-c all", "k-a all"])
    crash = tmp_path / "crash"
    shutil.copytree(data, crash, ignore=shutil.ignore_patterns("lock"))
    await first.stop()

    second = await broker_factory(data_dir=crash, broker_port=port, **TINY)
    assert second.store.index.reindexed >= 3
    sent = flushed + late
    async with AdminClient(second.namesrv_addr) as admin:
        for result in sent:
            assert (await admin.find_message(result.msg_id, topic="Unflushed"))[1].msg_id == (
                result.msg_id
            )
        by_key = await admin.query_by_key("Unflushed", "k-a")
        assert sorted(m.msg_id for m in by_key.messages) == sorted(
            [flushed[0].msg_id, late[0].msg_id, late[2].msg_id]
        )
        assert len((await admin.query_by_key("Unflushed", "all")).messages) == 5


async def test_lookups_after_kill_9(tmp_path):
    data = tmp_path / "killed"
    broker = BrokerProcess(data, log_path=tmp_path / "broker.log")
    await broker.start()
    try:
        keys = [f"kill-{i % 3} all" for i in range(9)]
        sent = await _send(broker.namesrv_addr, "Killed", list(keys))
        broker.kill9()  # most likely before the flush thread's next round (0.5 s)
        await broker.start()
        await _check_lookups(broker.namesrv_addr, "Killed", sent, keys)
    finally:
        broker.stop()


# ----------------------------------------------------------------------- semantics


async def test_keys_sharing_a_hash_are_told_apart(broker_factory):
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" do too: the
    # broker answers both (the index holds hashes only), the client keeps the match.
    assert java_string_hash("Twins#Aa") == java_string_hash("Twins#BB")
    broker = await broker_factory(max_hash_slot_num=1, max_index_num=1000)
    sent = await _send(broker.namesrv_addr, "Twins", ["Aa", "BB", "Aa x", None, "x"])
    raw = await _query(broker.broker_addr, "Twins", "Aa")
    assert raw.code == ResponseCode.SUCCESS
    assert {m.keys for m in messages_of(raw)} == {"Aa", "BB", "Aa x"}
    async with AdminClient(broker.namesrv_addr) as admin:
        aa = await admin.query_by_key("Twins", "Aa")
        assert [m.msg_id for m in aa.messages] == [sent[0].msg_id, sent[2].msg_id]
        bb = await admin.query_by_key("Twins", "BB")
        assert [m.msg_id for m in bb.messages] == [sent[1].msg_id]
        # One slot holds every key: each unique id still finds only its message.
        for result in sent:
            assert (await admin.query_by_unique_id("Twins", result.msg_id)).msg_id == result.msg_id
        # A key of another topic is another index key.
        assert (await admin.query_by_key("Twins", "nope")).messages == ()


async def test_the_time_range_is_respected(broker_factory):
    broker = await broker_factory()
    early = await _send(broker.namesrv_addr, "Timed", ["when"])
    await asyncio.sleep(2.2)
    late = await _send(broker.namesrv_addr, "Timed", ["when"])
    async with AdminClient(broker.namesrv_addr) as admin:
        both = await admin.query_by_key("Timed", "when")
        stored = {m.msg_id: m.store_timestamp for m in both.messages}
        t1 = stored[early[0].msg_id]
        assert stored[late[0].msg_id] - t1 >= 2000
        # Entries keep their time in whole seconds since the file began (as Apache):
        # one second past the first message is clear of both.
        after = await admin.query_by_key("Timed", "when", begin=t1 + 1000)
        assert [m.msg_id for m in after.messages] == [late[0].msg_id]
        before = await admin.query_by_key("Timed", "when", end=t1 + 1000)
        assert [m.msg_id for m in before.messages] == [early[0].msg_id]
        none = await admin.query_by_key("Timed", "when", begin=0, end=t1 - 5000)
        assert none.messages == ()
    raw = await _query(broker.broker_addr, "Timed", "when", end=t1 - 5000)
    assert (raw.code, raw.remark) == (
        ResponseCode.QUERY_NOT_FOUND,
        "can not find message, maybe time range not correct",
    )
    # As DefaultMessageStore.queryMessage: only a query that found entries reports them.
    assert raw.ext_fields == {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
    raw = await _query(broker.broker_addr, "Timed", "when", begin=t1 + 1000)
    assert int(raw.ext_fields["indexLastUpdateTimestamp"]) == stored[late[0].msg_id]
    assert (
        int(raw.ext_fields["indexLastUpdatePhyoffset"])
        == decode_offset_msg_id(late[0].offset_msg_id)[1]
    )


async def test_max_num_is_respected(broker_factory):
    broker = await broker_factory()
    sent = await _send(broker.namesrv_addr, "Many", ["same"] * 70)
    raw = await _query(broker.broker_addr, "Many", "same", max_num=3)
    # The newest three (the index walks back from the newest), in commit log order.
    assert [m.msg_id for m in messages_of(raw)] == [r.msg_id for r in sent[-3:]]
    raw = await _query(broker.broker_addr, "Many", "same", max_num=1000)
    assert len(messages_of(raw)) == 64  # maxMsgsNumBatch
    # A unique-key query: the broker sets maxNum itself (defaultQueryMaxNum 32).
    raw = await _query(broker.broker_addr, "Many", "same", max_num=1, _UNIQUE_KEY_QUERY="true")
    assert len(messages_of(raw)) == 32
    async with AdminClient(broker.namesrv_addr) as admin:
        assert len((await admin.query_by_key("Many", "same", max_num=5)).messages) == 5


async def test_query_message_answers_as_apache(broker_factory):
    broker = await broker_factory()
    await _send(broker.namesrv_addr, "Answers", ["k"])
    client = await RawClient.connect(broker.broker_addr)
    try:
        missing = await client.call(RequestCode.QUERY_MESSAGE, {"topic": "Answers", "key": "k"})
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert missing.remark.endswith("the custom field <maxNum> is null")
        fields = {"topic": "Answers", "key": "k", "maxNum": "x", "beginTimestamp": 0,
                  "endTimestamp": 1}  # fmt: skip
        bad = await client.call(RequestCode.QUERY_MESSAGE, fields)
        assert (bad.code, bad.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "java.lang.NullPointerException",
        )
        gone = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 1 << 40})
        assert (gone.code, gone.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"can not find message by the offset, {1 << 40}",
        )
    finally:
        await client.close()
    found = await _query(broker.broker_addr, "Answers", "k")
    assert found.code == ResponseCode.SUCCESS and found.remark is None
    assert set(found.ext_fields) == {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}


async def test_a_disabled_index_finds_nothing(broker_factory):
    broker = await broker_factory(message_index_enable=False)
    await _send(broker.namesrv_addr, "Plain", ["k"])
    assert (await _query(broker.broker_addr, "Plain", "k")).code == ResponseCode.QUERY_NOT_FOUND
    assert not (broker.data_dir / "index").exists()


def test_broker_conf_index_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# MessageStoreConfig\nmessageIndexEnable=FALSE\nmaxHashSlotNum = 1000\n"
                    "maxIndexNum: 4000\n")  # fmt: skip
    assert read_broker_config(conf) == BrokerFileConfig(
        message_index_enable=False, max_hash_slot_num=1000, max_index_num=4000
    )
    for text, problem in (
        ("maxIndexNum=1", "maxIndexNum=1: must be at least 2"),
        ("maxHashSlotNum=0", "maxHashSlotNum=0: must be at least 1"),
        ("maxIndexNum=many", "maxIndexNum='many': expected a whole number"),
        ("messageIndexEnable=off", "messageIndexEnable='off': expected true or false"),
    ):
        conf.write_text(text + "\n")
        with pytest.raises(RmqkError, match=re.escape(problem)):
            read_broker_config(conf)


def _broker_with_conf(tmp_path: Path, name: str, conf_text: str) -> BrokerProcess:
    """``rmqk broker --config`` with a broker.conf of ``conf_text``, data in ``tmp_path/name``."""
    conf = tmp_path / f"{name}.conf"
    conf.write_text(conf_text)
    log = tmp_path / f"{name}.log"
    return BrokerProcess(tmp_path / name, log_path=log, extra_args=["--config", str(conf)])


async def test_rmqk_broker_takes_the_index_settings_from_broker_conf(tmp_path: Path) -> None:
    off = _broker_with_conf(tmp_path, "off", "messageIndexEnable=false\n")
    await off.start()
    try:
        (sent,) = await _send(off.namesrv_addr, "NoIndex", ["k"])
        # Apache's IndexService without a file: nothing found, and no index time to tell.
        for key, extra in (("k", {}), (sent.msg_id, {"_UNIQUE_KEY_QUERY": "true"})):
            answer = await _query(off.broker_addr, "NoIndex", key, **extra)
            assert (answer.code, answer.remark) == (
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
            )
            assert answer.ext_fields["indexLastUpdateTimestamp"] == "0"
            assert answer.ext_fields["indexLastUpdatePhyoffset"] == "0"
    finally:
        off.stop()
    assert not (tmp_path / "off" / "index").exists()

    sized = _broker_with_conf(tmp_path, "sized", "maxHashSlotNum=3\nmaxIndexNum=16\n")
    await sized.start()
    try:
        keys = ["a", "b"]
        sent_ab = await _send(sized.namesrv_addr, "Sized", list(keys))
        await _check_lookups(sized.namesrv_addr, "Sized", sent_ab, keys)
    finally:
        sized.stop()
    # Header, 3 hash slots of 4 bytes and 16 entries of 20 (Apache's IndexFile layout).
    (index_file,) = [f for f in (tmp_path / "sized" / "index").iterdir() if f.name.isdigit()]
    assert index_file.stat().st_size == 40 + 3 * 4 + 16 * 20


async def test_transactional_messages_are_found_in_their_topic_once_committed(broker_factory):
    from rmqk.engine.transaction import AsyncTransactionProducer, LocalTransactionState

    broker = await broker_factory()
    states = {
        b"committed": LocalTransactionState.COMMIT_MESSAGE,
        b"rolled-back": LocalTransactionState.ROLLBACK_MESSAGE,
        b"pending": LocalTransactionState.UNKNOW,
    }
    producer = AsyncTransactionProducer(
        "tx-index",
        namesrv_addr=broker.namesrv_addr,
        execute_local_transaction=lambda msg, arg: states[msg.body],
        check_local_transaction=lambda msg: LocalTransactionState.UNKNOW,
    )
    await producer.start()
    try:
        sent = {
            body: await producer.send_message_in_transaction(
                Message("TxIndexed", body, keys=f"tx-{body.decode()} tx-all"), None
            )
            for body in states
        }
    finally:
        await producer.shutdown()
    async with AdminClient(broker.namesrv_addr) as admin:
        found = await admin.query_by_key("TxIndexed", "tx-all")
        assert [m.body for m in found.messages] == [b"committed"]
        assert (await admin.query_by_unique_id("TxIndexed", sent[b"committed"].msg_id)) is not None
        for body in (b"rolled-back", b"pending"):
            assert (await admin.query_by_unique_id("TxIndexed", sent[body].msg_id)) is None
    # As on Apache, half messages are indexed under the topic they are stored in.
    half = broker.store.query_message("RMQ_SYS_TRANS_HALF_TOPIC", "tx-all", 64, 0, LONG_MAX)
    assert len(half.records) == 3


def test_rolled_back_messages_are_not_indexed_and_half_messages_stay_in_their_topic(tmp_path):
    with MessageStore(tmp_path / "s", index=IndexConfig(**TINY)) as store:
        for sys_flag, topic, key in (
            (0xC, "Real", "rolled-back"),  # TRANSACTION_ROLLBACK_TYPE: never indexed
            (0x4, "RMQ_SYS_TRANS_HALF_TOPIC", "half"),  # prepared: under its stored topic
            (0x8, "Real", "committed"),
        ):
            result = store.put_message(
                topic=topic, queue_id=0, body=b"x", flag=0, sys_flag=sys_flag,
                properties_raw=format_properties({"KEYS": key, "UNIQ_KEY": f"U-{key}"}),
                born_timestamp=1, born_host="127.0.0.1:1",
            )  # fmt: skip
            assert result.ok

        def hits(topic: str, key: str) -> int:
            return len(store.query_message(topic, key, 64, 0, LONG_MAX).records)

        assert hits("Real", "rolled-back") == hits("Real", "U-rolled-back") == 0
        assert hits("RMQ_SYS_TRANS_HALF_TOPIC", "half") == 1
        assert hits("Real", "half") == 0
        assert hits("Real", "committed") == hits("Real", "U-committed") == 1


def test_a_damaged_index_is_rebuilt_and_retention_deletes_old_index_files(tmp_path):
    root = tmp_path / "s"
    options: dict[str, Any] = {"segment_size": 8192, "max_message_size": 4096}

    def put(store: MessageStore, n: int) -> None:
        for i in range(n):
            assert store.put_message(
                topic="T", queue_id=0, body=b"y" * 500, flag=0, sys_flag=0,
                properties_raw=format_properties({"KEYS": f"k{i % 5}"}),
                born_timestamp=1, born_host="127.0.0.1:1",
            ).ok  # fmt: skip

    with MessageStore(root, index=IndexConfig(**TINY), **options) as store:
        put(store, 40)
    files = sorted((root / "index").glob("2*"))
    files[-1].write_bytes(b"garbage")  # the last file, cut short
    with MessageStore(root, index=IndexConfig(**TINY), **options) as store:
        assert store.index.reindexed > 0
        assert len(store.query_message("T", "k3", 64, 0, LONG_MAX).records) == 8
        before = len(list((root / "index").glob("2*")))
        store.delete_commit_log_before(store.commit_log.max_offset - 8192)
        after = len(list((root / "index").glob("2*")))
        assert 0 < after < before
        # What the commit log still holds is still found.
        left = store.query_message("T", "k3", 64, 0, LONG_MAX).records
        assert 0 < len(left) < 8


# ----------------------------------------------------------------------- the CLI


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def dialed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every address the admin client connects to."""
    addresses: list[str] = []
    real = connection.connect

    async def connect(addr: str, *args: Any, **kwargs: Any) -> Any:
        addresses.append(addr)
        return await real(addr, *args, **kwargs)

    monkeypatch.setattr(connection, "connect", connect)
    return addresses


def _send_sync(thread: Any, topic: str, keys: list[str | None]) -> list[SendResult]:
    return asyncio.run(_send(thread.namesrv_addr, topic, keys))


def test_admin_message_tells_the_kind_of_id_and_finds_by_key(broker_thread, capsys):
    sent = _send_sync(broker_thread, "Cli", ["order-7 x", "order-8", "order-7"])
    n = broker_thread.namesrv_addr
    code, out, err = _run(
        capsys, "admin", "message", sent[0].msg_id, "-t", "Cli", "-n", n, "--json"
    )
    assert code == 0, err
    info = json.loads(out)
    assert (info["idKind"], info["msgId"], info["body"]) == ("unique", sent[0].msg_id, "body-0")
    assert info["offsetMsgId"] == sent[0].offset_msg_id

    code, out, err = _run(capsys, "admin", "message", sent[1].offset_msg_id, "-n", n)
    assert code == 0, err
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines())}
    assert fields["Id Kind"].startswith("offset id")
    assert (fields["MsgId"], fields["Message Body"]) == (sent[1].msg_id, "body-1")

    code, out, err = _run(capsys, "admin", "message", sent[2].msg_id, "--topic", "Cli", "-n", n)
    assert code == 0, err
    assert "unique id (the client's UNIQ_KEY)" in out and sent[2].offset_msg_id in out

    code, out, err = _run(capsys, "admin", "message", "--key", "order-7", "-t", "Cli", "-n", n)
    assert code == 0, err
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "MSG ID", "OFFSET ID", "QID", "QUEUE OFFSET", "STORE TIME", "KEYS"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == [sent[0].msg_id, sent[2].msg_id]

    code, out, err = _run(
        capsys, "admin", "message", "-k", "order-7", "-t", "Cli", "-n", n, "--json",
        "--end", str(int(time.time() * 1000) - 3_600_000),
    )  # fmt: skip
    assert code == 1 and out == ""
    assert "no message with key 'order-7' in topic 'Cli' stored in the time range" in err

    code, _, err = _run(capsys, "admin", "message", sent[0].msg_id, "-t", "Other", "-n", n)
    assert code == 1
    assert "topic 'Other' has no route" in err or "no message with unique id" in err


def test_bad_ids_and_arguments_fail_without_any_connection(broker_thread, capsys, dialed):
    n = broker_thread.namesrv_addr
    for bad in ("nothex", "", "ABCD", "7F" * 17, "zz" * 16):
        code, out, err = _run(capsys, "admin", "message", bad, "-t", "Cli", "-n", n)
        assert code == 1 and out == ""
        assert "is not an offset message id nor a unique (client) one" in err, err
    for argv in (
        ["--key", "k"],  # keys are indexed per topic
        ["--key", "k", "-t", "T", "7F000001000027110000000000000000"],  # both
        [],  # nothing to look up
        ["--key", "k", "-t", "T", "--begin", "2000", "--end", "1000"],
    ):
        code, _, err = _run(capsys, "admin", "message", *argv, "-n", n)
        assert code == 1 and err.startswith("rmqk: error: "), (argv, err)
    with pytest.raises(SystemExit) as exited:
        main(["admin", "message", "-k", "k", "-t", "T", "--begin", "soon", "-n", n])
    assert exited.value.code == 2
    assert "neither epoch milliseconds nor an ISO date" in capsys.readouterr().err
    assert dialed == []


def test_an_offset_id_naming_a_foreign_address_is_refused_not_dialled(
    broker_thread, capsys, dialed
):
    foreign = offset_msg_id("10.255.255.1:10911", 4096)
    for extra in ([], ["--topic", "Cli"]):
        code, _, err = _run(capsys, "admin", "message", foreign, "-n", broker_thread.namesrv_addr,
                            *extra)  # fmt: skip
        assert code == 1
        assert "names 10.255.255.1:10911, which is not a broker of the cluster" in err, err
    assert set(dialed) == {broker_thread.namesrv_addr}


# ----------------------------------------------------------------------- the docs


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def test_the_operations_guide_example_runs(broker_thread, tmp_path):
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page.split("## Finding a message", 1)[1].split("\n## ", 1)[0]
    (python_code,) = _blocks(section, "python")
    (shell,) = _blocks(section, "bash")
    n = broker_thread.namesrv_addr
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    script = tmp_path / "send.py"
    script.write_text(python_code.replace("127.0.0.1:9876", n))
    sent = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60,
        check=True,
    )  # fmt: skip
    msg_id, offset_id = sent.stdout.split()
    done = subprocess.run(
        ["bash", "-euc", shell.replace("127.0.0.1:9876", n)],
        capture_output=True, text=True, timeout=60,
        env={**env, "MSG_ID": msg_id, "OFFSET_MSG_ID": offset_id},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("order-1001") >= 3, done.stdout
    assert "unique id (the client's UNIQ_KEY)" in done.stdout
    assert "offset id (store host and commit log offset)" in done.stdout
    assert msg_id in done.stdout and offset_id in done.stdout

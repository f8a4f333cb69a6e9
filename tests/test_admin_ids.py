"""`rmqk admin message` refuses ids it cannot use and never dials an address outside the
cluster; `rmqk admin consumer progress` of an unknown group is an error (issue 15 #3, #9)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rmqk.app.cli import main
from rmqk.model.message import offset_msg_id
from rmqk.plugins.admin.admin_client import MessageIdKind, message_id_kind
from rmqk.plugins.broker import connection
from rmqk.wire.uniq_id import UniqIdGenerator, create_uniq_id

pytestmark = pytest.mark.timeout(90)


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


def test_offset_and_unique_ids_are_told_apart() -> None:
    rng = random.Random(15)
    for _ in range(2000):
        host = f"{rng.randrange(1, 255)}.{rng.randrange(256)}.0.{rng.randrange(256)}"
        store = f"{host}:{rng.randrange(1, 65536)}"
        assert message_id_kind(offset_msg_id(store, rng.randrange(1 << 44))) is MessageIdKind.OFFSET
        assert message_id_kind(offset_msg_id("[::1]:10911", 7)) is MessageIdKind.OFFSET
        generator = UniqIdGenerator(
            ip=bytes(rng.randrange(256) for _ in range(4)),
            pid=rng.randrange(1, 65536),
            loader_hash=rng.getrandbits(32) | 1,
        )
        assert message_id_kind(generator.create()) is MessageIdKind.UNIQUE
    for text in ("nothex", "", "ABCD", "7F" * 17):
        assert message_id_kind(text) is MessageIdKind.INVALID


def test_unique_id_is_refused_without_dialing_what_it_decodes_to(
    broker_thread: Any, capsys: pytest.CaptureFixture[str], dialed: list[str]
) -> None:
    uniq = create_uniq_id()
    code, _, err = _run(capsys, "admin", "message", uniq, "-n", broker_thread.namesrv_addr)
    assert code == 1
    assert err.startswith(f"rmqk: error: {uniq} is a unique (client) message id; "), err
    assert "needs an offset message id (32 hex chars from the broker" in err
    assert "Traceback" not in err and "OverflowError" not in err
    assert dialed == []


def test_offset_id_of_an_address_outside_the_cluster_is_not_dialed(
    broker_thread: Any, capsys: pytest.CaptureFixture[str], dialed: list[str]
) -> None:
    foreign = offset_msg_id("10.255.255.1:10911", 4096)
    code, _, err = _run(capsys, "admin", "message", foreign, "-n", broker_thread.namesrv_addr)
    assert code == 1
    assert "names 10.255.255.1:10911, which is not a broker of the cluster" in err, err
    assert broker_thread.broker_addr in err
    assert "10.255.255.1:10911" not in dialed
    assert dialed == [broker_thread.namesrv_addr]


def test_progress_of_an_unknown_group_is_an_error(
    broker_thread: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ([], ["--json"]):
        code, out, err = _run(
            capsys, "admin", "consumer", "progress", "nogroup", "-n", broker_thread.namesrv_addr,
            *extra,
        )  # fmt: skip
        assert code == 1
        assert out == ""
        assert err.startswith("rmqk: error: consumer group 'nogroup' is not online"), err
        assert "has no offsets on any broker" in err

"""`rmqk status`: members found through the cluster, and what --watch draws (exact strings)."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

from rmqk.console.termchart import bar, bar_chart, progress_line, sparkline, use_unicode
from rmqk.model import MessageQueue
from rmqk.model.errors import BrokerError
from rmqk.plugins.status.collect import GroupStatus, QueueStatus, group_status
from rmqk.plugins.status.watch import LagHistory, format_watch, lag_line
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode


class _Stream:
    def __init__(self, encoding: str | None) -> None:
        self.encoding = encoding


def test_unicode_only_where_the_stream_encodes_utf8() -> None:
    assert use_unicode(_Stream("UTF-8")) and use_unicode(_Stream("utf8"))
    assert not use_unicode(_Stream("ANSI_X3.4-1968")) and not use_unicode(_Stream(None))


def test_bars_in_eighths_and_in_ascii() -> None:
    assert bar(5, 10, 4) == "██  "
    assert bar(3, 10, 4) == "█▎  "  # 9.6 eighths round to 10
    assert bar(10, 10, 4) == "████"
    assert bar(0, 10, 4) == "    "
    assert bar(1, 1000, 4) == "▏   "  # something is not nothing
    assert bar(5, 10, 4, unicode=False) == "##  "
    assert bar(1, 1000, 4, unicode=False) == "#   "


def test_bar_chart_lines_up_labels_bars_and_values() -> None:
    rows = [("created", 10356), ("cancelled", 1067), ("paid", 9289)]
    assert bar_chart(rows, width=10) == [
        "  created   ██████████ 10,356",
        "  cancelled █           1,067",
        "  paid      █████████   9,289",
    ]
    assert bar_chart(rows, width=10, unicode=False) == [
        "  created   ########## 10,356",
        "  cancelled #           1,067",
        "  paid      #########   9,289",
    ]


def test_sparkline_scales_from_zero_and_keeps_the_last_values() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5000, 5000, 5000]) == "███"  # a steady backlog is high, not low
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([9, 0, 10, 5], width=2) == "█▅"  # scaled to what is shown
    assert sparkline([0, 6, 10], unicode=False) == "_=#"
    assert sparkline([]) == ""


def test_progress_line_has_one_rate_and_a_fixed_width() -> None:
    early = progress_line("producing", 6656, 30000, 7937.4, width=10)
    late = progress_line("producing", 30000, 30000, 15611.0, width=10)
    assert early == "producing [██▎       ]  6,656/30,000     7,937 msg/s"
    assert late == "producing [██████████] 30,000/30,000    15,611 msg/s"
    assert len(early) == len(late) and early.count("msg/s") == 1
    ascii_line = progress_line("consuming", 5, 10, 1.0, width=4, unit="rows/s", unicode=False)
    assert ascii_line == "consuming [##..]  5/10         1 rows/s"


def _status(lag: int, name: str | None = "orders") -> GroupStatus:
    mq = MessageQueue("Orders", "broker-a", 0)
    return GroupStatus("g", ("Orders",), (), (QueueStatus(mq, lag, 0),), (), name)


def test_lag_line_fits_its_width() -> None:
    line = lag_line("group g", [100, 50, 0, 25], width=50, unicode=True)
    assert line == "group g lag █▅▁▃ now 25 (min 0, max 100)"
    assert lag_line("group g", [], width=50, unicode=True) == "group g lag: no sample yet"
    long = lag_line("group g", list(range(500)), width=60, unicode=False)
    assert len(long) == 60 and long.endswith(" now 499 (min 0, max 499)")


def test_watch_screen_is_a_title_a_sparkline_per_group_and_the_tables() -> None:
    history = LagHistory()
    for lag in (40, 20, 0):
        history.add([_status(lag)])
    screen = format_watch(
        [_status(0)],
        history,
        tables="[consumers.orders] group g: ...",
        seconds=0.5,
        width=60,
        unicode=True,
        now=datetime.datetime(2026, 1, 1, 12, 0, 5),
    )
    assert screen == (
        "rmqk status, every 0.5 s, 12:00:05; Ctrl-C stops\n"
        "[consumers.orders] lag █▅▁ now 0 (min 0, max 40)\n"
        "\n"
        "[consumers.orders] group g: ..."
    )


class _ClusterOnly:
    """A cluster where the group's topics have no route, but one broker knows a member."""

    broker = "127.0.0.1:10911"

    async def get_route(self, topic: str, timeout_ms: int | None = None) -> None:
        return None

    async def get_consumer_ids(self, addr: str, group: str, timeout_ms: int) -> list[str]:
        if addr != self.broker:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, "no consumer", addr)
        return ["10.0.0.5@1234"]

    async def invoke(self, addr: str, request: RemotingCommand, timeout_ms: int) -> Any:
        if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            assert addr == "127.0.0.1:9876"
            body = {
                "brokerAddrTable": {
                    "broker-a": {"brokerName": "broker-a", "brokerAddrs": {"0": self.broker}}
                },
                "clusterAddrTable": {"DefaultCluster": ["broker-a"]},
            }
        else:
            assert request.code == RequestCode.GET_CONSUMER_RUNNING_INFO and addr == self.broker
            body = {
                "properties": {"PROP_CONSUMEORDERLY": "false"},
                "subscriptionSet": [{"topic": "NoSuchTopic"}],
                "mqTable": {},
            }
        return RemotingCommand.response_to(request, body=json.dumps(body).encode())


def test_a_member_on_a_missing_topic_is_found_through_the_cluster_info() -> None:
    status = asyncio.run(
        group_status(
            _ClusterOnly(),  # type: ignore[arg-type]
            "g-missing",
            ["NoSuchTopic"],
            namesrv_addrs=["127.0.0.1:9876"],
        )
    )
    (client,) = status.clients
    assert client.client_id == "10.0.0.5@1234" and client.state == "RUNNING"
    assert client.topics == ("NoSuchTopic",)
    assert status.problems == (
        "topic NoSuchTopic does not exist: create it (rmqk admin topic create NoSuchTopic)",
    )


def test_watch_before_the_config_takes_it_as_the_config() -> None:
    import argparse

    import pytest

    from rmqk.model.errors import RmqkError
    from rmqk.plugins.status import _watch_seconds

    def given(watch: str | None, config: str | None = None) -> argparse.Namespace:
        return argparse.Namespace(watch=watch, config=config)

    # `rmqk status --watch examples/jsonl.toml`: a watch every 2 s of that config.
    args = given("examples/jsonl.toml")
    assert _watch_seconds(args) == 2.0 and args.config == "examples/jsonl.toml"
    assert _watch_seconds(given("0.5", "c.toml")) == 0.5
    assert _watch_seconds(given(None, "c.toml")) is None
    with pytest.raises(RmqkError, match="positive"):
        _watch_seconds(given("0", "c.toml"))
    with pytest.raises(RmqkError, match=r"number of seconds, got 'x\.toml'"):
        _watch_seconds(given("x.toml", "c.toml"))

"""The allocation strategies against Java's results, their checks and their options.

Expected tables are worked out by hand from the algorithms of Apache RocketMQ
4.9.8 (client/.../consumer/rebalance). The CONSISTENT_HASH, MACHINE_ROOM and
MACHINE_ROOM_NEARBY golden results were also produced by running those Java
classes on the same inputs.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence

import pytest

from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.pluginmanager import get_plugin_manager, registries, reset_plugin_manager
from rmqk.plugins.allocation import (
    BUILTIN_FACTORIES,
    BUILTIN_STRATEGIES,
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueConsistentHash,
    md5_hash,
)
from rmqk.plugins.allocation.machine_room import broker_machine_room
from rmqk.spi.contracts import AllocationStrategy, AllocationStrategyContext
from rmqk.spi.factory import PluginFactory
from rmqk.spi.hookspecs import Register, hookimpl

pytestmark = pytest.mark.timeout(60)

ALL_NAMES = {
    "AVG",
    "AVG_BY_CIRCLE",
    "CONSISTENT_HASH",
    "CONFIG",
    "MACHINE_ROOM",
    "MACHINE_ROOM_NEARBY",
}
CHECKED_OPTIONS: dict[str, dict[str, object]] = {
    "AVG": {},
    "AVG_BY_CIRCLE": {},
    "CONSISTENT_HASH": {},
    "MACHINE_ROOM": {"consumer_idcs": ["r1"]},
    "MACHINE_ROOM_NEARBY": {},
}


def queues(n: int, topic: str = "T", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(n: int) -> list[str]:
    return [f"10.0.0.{i}@pid{i}" for i in range(n)]


def shares(
    strategy: AllocationStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[list[int]]:
    """Each consumer's allocation, as indexes into mq_all."""
    return [
        [mq_all.index(mq) for mq in strategy.allocate("g", cid, mq_all, cid_all)] for cid in cid_all
    ]


def check_builtin(name: str, m: int, c: int, expected: list[list[int]]) -> None:
    """The built-in ``name`` shares ``m`` queues among ``c`` consumers as ``expected``."""
    strategy = BUILTIN_FACTORIES[name]()
    assert strategy.name == name
    assert shares(strategy, queues(m), cids(c)) == expected


# -- AVG ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "c", "expected"),
    [
        (8, 4, [[0, 1], [2, 3], [4, 5], [6, 7]]),
        (4, 3, [[0, 1], [2], [3]]),
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
        (7, 3, [[0, 1, 2], [3, 4], [5, 6]]),
        (2, 5, [[0], [1], [], [], []]),
        (3, 3, [[0], [1], [2]]),
        (1, 1, [[0]]),
        (5, 1, [[0, 1, 2, 3, 4]]),
    ],
)
def test_avg_matches_java(m: int, c: int, expected: list[list[int]]) -> None:
    check_builtin("AVG", m, c, expected)


# -- AVG_BY_CIRCLE --------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "c", "expected"),
    [
        (8, 4, [[0, 4], [1, 5], [2, 6], [3, 7]]),
        (10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
        (7, 3, [[0, 3, 6], [1, 4], [2, 5]]),
        (2, 5, [[0], [1], [], [], []]),
        (1, 1, [[0]]),
        (5, 1, [[0, 1, 2, 3, 4]]),
    ],
)
def test_avg_by_circle_matches_java(m: int, c: int, expected: list[list[int]]) -> None:
    check_builtin("AVG_BY_CIRCLE", m, c, expected)


# -- CONSISTENT_HASH ------------------------------------------------------------

TOPIC_TEST_8 = queues(4, "TopicTest", "broker-a") + queues(4, "TopicTest", "broker-b")


def _independent_md5_hash(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:4], "big")


@pytest.mark.parametrize(
    ("key", "golden"),
    [
        ("MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=0]", 1987926524),
        ("CID-a-0", 1496663785),
        ("192.168.0.1@1234#1-9", 2089486785),
        ("主题", 2574298375),
    ],
)
def test_md5_hash_is_javas_default_hash(key: str, golden: int) -> None:
    assert md5_hash(key) == golden == _independent_md5_hash(key)


def test_consistent_hash_hashes_java_message_queue_text() -> None:
    mq = TOPIC_TEST_8[0]
    assert str(mq) == "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=0]"
    assert md5_hash(str(mq)) == 1987926524


@pytest.mark.parametrize(
    ("virtual_nodes", "cid_all", "expected"),
    [
        (
            10,
            ["192.168.0.1@1234#1", "192.168.0.2@5678#2", "192.168.0.3@9#3"],
            [[0, 1, 6], [2, 3, 5], [4, 7]],
        ),
        (3, ["CID-a", "CID-b"], [[0, 1, 3, 4, 6, 7], [2, 5]]),
        (1, ["CID-a", "CID-b", "CID-c", "CID-d"], [[1, 2, 3, 5, 6, 7], [], [], [0, 4]]),
    ],
)
def test_consistent_hash_golden_results_from_java(
    virtual_nodes: int, cid_all: list[str], expected: list[list[int]]
) -> None:
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](virtual_node_count=virtual_nodes)
    assert strategy.name == "CONSISTENT_HASH"
    assert shares(strategy, TOPIC_TEST_8, cid_all) == expected


def test_consistent_hash_default_is_ten_virtual_nodes_and_leaves_consumers_idle() -> None:
    # m < c: Java gives these four queues to c2, c5 and c6 (two) and nothing to the others.
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"]()
    assert strategy == AllocateMessageQueueConsistentHash(10)
    mq_all = queues(4, "Orders", "broker-a")
    cid_all = ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert shares(strategy, mq_all, cid_all) == [[], [0], [], [], [1], [2, 3]]


def test_consistent_hash_ring_is_built_from_cid_dash_index_keys() -> None:
    # One virtual node per consumer: the ring keys are md5("<cid>-0"); each queue goes
    # to the first key >= its own hash, wrapping around. Worked out here independently.
    cid_all = ["CID-a", "CID-b", "CID-c"]
    ring = sorted((_independent_md5_hash(f"{cid}-0"), cid) for cid in cid_all)
    expected: dict[str, list[int]] = {cid: [] for cid in cid_all}
    for i, mq in enumerate(TOPIC_TEST_8):
        h = _independent_md5_hash(str(mq))
        owner = next((cid for key, cid in ring if key >= h), ring[0][1])
        expected[owner].append(i)
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](virtual_node_count=1)
    assert shares(strategy, TOPIC_TEST_8, cid_all) == [expected[c] for c in cid_all]


def test_consistent_hash_zero_virtual_nodes_assigns_nothing_like_java() -> None:
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](virtual_node_count=0)
    assert shares(strategy, queues(5), cids(3)) == [[], [], []]


def test_consistent_hash_custom_hash_function_by_name() -> None:
    # len("a-0") = 3 and len("bb-0") = 4; every queue text is longer, so all wrap to "a".
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](
        virtual_node_count=1, hash_function="builtins:len"
    )
    assert shares(strategy, queues(3), ["a", "bb"]) == [[0, 1, 2], []]


def test_consistent_hash_custom_hash_function_must_return_int() -> None:
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](hash_function=lambda key: "x")
    with pytest.raises(TypeError, match="must return an int"):
        strategy.allocate("g", "a", queues(1), ["a"])


def test_consistent_hash_negative_count_rejected_by_constructor_like_java() -> None:
    with pytest.raises(ValueError, match="illegal virtualNodeCnt :-1"):
        AllocateMessageQueueConsistentHash(-1)


# -- CONFIG ---------------------------------------------------------------------


def test_config_returns_configured_queues_whatever_the_inputs() -> None:
    strategy = BUILTIN_FACTORIES["CONFIG"](
        queues=[
            {"topic": "Orders", "broker_name": "broker-b", "queue_id": 3},
            {"topic": "Orders", "broker_name": "broker-a", "queue_id": 1},
        ]
    )
    assert strategy.name == "CONFIG"
    expected = [MessageQueue("Orders", "broker-b", 3), MessageQueue("Orders", "broker-a", 1)]
    assert strategy.allocate("g", "me", queues(8), ["me", "you"]) == expected
    # Java runs no input checks for CONFIG, so empty inputs are not errors either.
    assert strategy.allocate("g", "", [], []) == expected
    returned = strategy.allocate("g", "me", [], [])
    returned.clear()
    assert strategy.allocate("g", "me", [], []) == expected


def test_config_accepts_message_queue_objects() -> None:
    mq = MessageQueue("T", "b", 0)
    assert BUILTIN_FACTORIES["CONFIG"](queues=[mq]).allocate("g", "x", [], []) == [mq]


# -- MACHINE_ROOM ---------------------------------------------------------------


def test_machine_room_java_unit_test_case() -> None:
    # RocketMQ's own AllocateMessageQueueByMachineRoomTest: 5 queues in room1, 5 in room2.
    mq_all = queues(5, "topic", "room1@broker-a") + [
        MessageQueue("topic", "room2@broker-b", i) for i in range(5, 10)
    ]
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM"](consumer_idcs=["room1"])
    assert strategy.name == "MACHINE_ROOM"
    result = [
        [mq.queue_id for mq in strategy.allocate("", cid, mq_all, ["CID_PREFIX0", "CID_PREFIX1"])]
        for cid in ["CID_PREFIX0", "CID_PREFIX1"]
    ]
    assert result == [[0, 1, 4], [2, 3]]


def test_machine_room_golden_result_from_java() -> None:
    mq_all = (
        queues(4, "T", "r1@b1")
        + queues(4, "T", "r2@b2")
        + queues(3, "T", "r3@b3")
        + [MessageQueue("T", "b9", 0), MessageQueue("T", "x@y@", 0)]
    )
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM"](consumer_idcs=["r1", "r3"])
    assert shares(strategy, mq_all, ["a", "b", "c"]) == [[0, 1, 10], [2, 3], [8, 9]]


@pytest.mark.parametrize(
    ("broker_name", "room"),
    [
        ("room1@broker-a", "room1"),
        ("room1@broker-a@", "room1"),  # Java's split drops trailing empty parts
        ("@broker-a", ""),
        ("broker-a", None),
        ("a@b@c", None),
        ("room1@", None),
        ("@@", None),
    ],
)
def test_broker_machine_room_splits_like_java(broker_name: str, room: str | None) -> None:
    assert broker_machine_room(broker_name) == room


# -- MACHINE_ROOM_NEARBY --------------------------------------------------------

NEARBY_QUEUES = queues(4, "T", "r1@b1") + queues(4, "T", "r2@b2") + queues(3, "T", "r3@b3")
NEARBY_CIDS = ["10.0.0.1@r1", "10.0.0.2@r1", "10.0.0.3@r2"]


@pytest.mark.parametrize(
    ("inner", "expected"),
    [
        # r1's queues go to r1's two consumers, r2's to r2's one, and r3 has no consumer,
        # so its queues are shared by everybody with the inner strategy.
        ("AVG", [[0, 1, 8], [2, 3, 9], [4, 5, 6, 7, 10]]),
        ("AVG_BY_CIRCLE", [[0, 2, 8], [1, 3, 9], [4, 5, 6, 7, 10]]),
    ],
)
def test_machine_room_nearby_golden_results_from_java(
    inner: str, expected: list[list[int]]
) -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"](inner=inner)
    assert strategy.name == f"MACHINE_ROOM_NEARBY-{inner}"
    assert shares(strategy, NEARBY_QUEUES, NEARBY_CIDS) == expected


def test_machine_room_nearby_defaults_to_avg_and_room_from_instance_name() -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"]()
    assert strategy.name == "MACHINE_ROOM_NEARBY-AVG"
    # "<room>#<suffix>" instance names put several processes of one host in one room.
    cid_all = ["10.0.0.1@r1#1", "10.0.0.1@r1#2", "10.0.0.3@r2#1"]
    assert shares(strategy, NEARBY_QUEUES, cid_all) == [
        [0, 1, 8],
        [2, 3, 9],
        [4, 5, 6, 7, 10],
    ]


def test_machine_room_nearby_without_matching_rooms_is_the_inner_strategy() -> None:
    # Java's default instance names (pid#nanotime) name no broker room.
    cid_all = ["10.0.0.1@4242#99", "10.0.0.2@4343#98"]
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"]()
    expected = shares(AllocateMessageQueueAveragely(), queues(4, "T", "r1@b1"), cid_all)
    assert shares(strategy, queues(4, "T", "r1@b1"), cid_all) == expected == [[0, 1], [2, 3]]


def test_machine_room_nearby_custom_patterns() -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"](
        broker_room_pattern=r"^(\w+)-", consumer_room_pattern=r"@(\w+)$"
    )
    mq_all = queues(2, "T", "east-broker") + queues(2, "T", "west-broker")
    assert shares(strategy, mq_all, ["1.1.1.1@east", "2.2.2.2@west"]) == [[0, 1], [2, 3]]


class DashResolver:
    """The resolver of RocketMQ's AllocateMachineRoomNearByTest: the room is before '-'."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split("-")[0]


def test_machine_room_nearby_resolver_by_name_and_by_object() -> None:
    mq_all = queues(3, "T", "IDC1-broker") + queues(3, "T", "IDC2-broker")
    cid_all = ["IDC1-CID-0", "IDC3-CID-0"]
    # IDC2 has no consumer, so its three queues are shared; IDC1's stay in IDC1.
    expected = [[0, 1, 2, 3, 4], [5]]
    by_name = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"](resolver=f"{__name__}:DashResolver")
    by_object = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), DashResolver())
    assert shares(by_name, mq_all, cid_all) == expected
    assert shares(by_object, mq_all, cid_all) == expected


def test_machine_room_nearby_unresolvable_rooms_are_errors_with_javas_message() -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"]()
    with pytest.raises(ValueError, match=r"^Machine room is null for mq MessageQueue \[topic=T"):
        strategy.allocate("g", "1.1.1.1@r1", queues(1, "T", "no-room"), ["1.1.1.1@r1"])
    with pytest.raises(ValueError, match=r"^Machine room is null for consumer id 1\.1\.1\.1 "):
        strategy.allocate("g", "1.1.1.1", queues(1, "T", "r1@b"), ["1.1.1.1"])


def test_machine_room_nearby_inner_options_reach_the_inner_strategy() -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"](
        inner="CONSISTENT_HASH", inner_options={"virtual_node_count": 0}
    )
    assert strategy.name == "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"
    assert isinstance(strategy, AllocateMachineRoomNearby)
    assert strategy.inner == AllocateMessageQueueConsistentHash(0)


# -- the checks Java's AbstractAllocateMessageQueueStrategy makes ---------------


@pytest.mark.parametrize("name", sorted(CHECKED_OPTIONS))
def test_empty_inputs_raise_javas_messages(name: str) -> None:
    strategy = BUILTIN_FACTORIES[name](**CHECKED_OPTIONS[name])
    mq_all = queues(2, "T", "r1@b")
    with pytest.raises(ValueError, match=r"^currentCID is empty$"):
        strategy.allocate("g", "", mq_all, ["a@r1"])
    with pytest.raises(ValueError, match=r"^mqAll is null or mqAll empty$"):
        strategy.allocate("g", "a@r1", [], ["a@r1"])
    with pytest.raises(ValueError, match=r"^cidAll is null or cidAll empty$"):
        strategy.allocate("g", "a@r1", mq_all, [])


@pytest.mark.parametrize("name", sorted(CHECKED_OPTIONS))
def test_consumer_missing_from_cid_all_gets_nothing_and_is_logged(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    strategy = BUILTIN_FACTORIES[name](**CHECKED_OPTIONS[name])
    with caplog.at_level(logging.INFO, logger="rmqk.plugins.allocation"):
        result = strategy.allocate("my-group", "z@r1", queues(4, "T", "r1@b"), ["a@r1", "b@r1"])
    assert result == []
    assert "[BUG] ConsumerGroup: my-group The consumerId: z@r1 not in cidAll" in caplog.text


# -- options --------------------------------------------------------------------


def _problem(exc: pytest.ExceptionInfo[ConfigError]) -> tuple[str | None, str]:
    assert len(exc.value.problems) == 1
    problem = exc.value.problems[0]
    assert problem.table == "allocate_options"
    return problem.key, problem.message


@pytest.mark.parametrize(
    ("name", "options", "key", "words"),
    [
        ("AVG", {"virtual_node_count": 3}, "virtual_node_count", "allowed: no options"),
        ("AVG_BY_CIRCLE", {"x": 1}, "x", "allowed: no options"),
        ("CONSISTENT_HASH", {"virtual_node_count": -1}, "virtual_node_count", ">= 0, got -1"),
        ("CONSISTENT_HASH", {"virtual_node_count": "10"}, "virtual_node_count", "integer"),
        ("CONSISTENT_HASH", {"virtual_node_count": True}, "virtual_node_count", "integer"),
        ("CONSISTENT_HASH", {"vnodes": 3}, "vnodes", "virtual_node_count"),
        ("CONSISTENT_HASH", {"hash_function": "no_such_module_xyz:f"}, "hash_function", "import"),
        ("CONSISTENT_HASH", {"hash_function": "math:pi"}, "hash_function", "function"),
        ("CONSISTENT_HASH", {"hash_function": "math:"}, "hash_function", "package.module"),
        ("CONFIG", {}, "queues", "missing"),
        ("CONFIG", {"queues": "T/b/0"}, "queues", "list of tables"),
        ("CONFIG", {"queues": []}, "queues", "at least one"),
        ("CONFIG", {"queues": [{"topic": "T", "broker_name": "b"}]}, "queues[0].queue_id", "miss"),
        (
            "CONFIG",
            {"queues": [{"topic": "T", "broker_name": "b", "queue_id": -2}]},
            "queues[0].queue_id",
            ">= 0",
        ),
        (
            "CONFIG",
            {"queues": [{"topic": "T", "brokerName": "b", "queue_id": 0}]},
            "queues[0].brokerName",
            "allowed: topic, broker_name, queue_id",
        ),
        (
            "CONFIG",
            {"queues": [{"topic": "", "broker_name": "b", "queue_id": 0}]},
            "queues[0].topic",
            "non-empty",
        ),
        (
            "CONFIG",
            {"queues": [{"topic": "T", "broker_name": "b", "queue_id": 0}] * 2},
            "queues[1]",
            "second time",
        ),
        ("MACHINE_ROOM", {}, "consumer_idcs", "missing"),
        ("MACHINE_ROOM", {"consumer_idcs": "room1"}, "consumer_idcs", "list of strings"),
        ("MACHINE_ROOM", {"consumer_idcs": []}, "consumer_idcs", "at least one"),
        ("MACHINE_ROOM", {"consumer_idcs": ["r1", 2]}, "consumer_idcs[1]", "string"),
        ("MACHINE_ROOM_NEARBY", {"inner": "NO_SUCH"}, "inner", "unknown allocation strategy"),
        ("MACHINE_ROOM_NEARBY", {"inner": 3}, "inner", "name of an allocation strategy"),
        ("MACHINE_ROOM_NEARBY", {"inner_options": [1]}, "inner_options", "table"),
        (
            "MACHINE_ROOM_NEARBY",
            {"inner": "CONSISTENT_HASH", "inner_options": {"virtual_node_count": -1}},
            "inner_options.virtual_node_count",
            ">= 0",
        ),
        ("MACHINE_ROOM_NEARBY", {"broker_room_pattern": "(["}, "broker_room_pattern", "regular"),
        ("MACHINE_ROOM_NEARBY", {"consumer_room_pattern": ""}, "consumer_room_pattern", "regul"),
        (
            "MACHINE_ROOM_NEARBY",
            {"resolver": f"{__name__}:DashResolver", "broker_room_pattern": "x"},
            "broker_room_pattern",
            "cannot be combined with resolver",
        ),
        ("MACHINE_ROOM_NEARBY", {"resolver": "math:pi"}, "resolver", "broker_deploy_in"),
    ],
)
def test_option_errors_name_the_option_and_what_is_allowed(
    name: str, options: dict[str, object], key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        BUILTIN_FACTORIES[name](**options)
    problem_key, message = _problem(exc)
    assert problem_key == key
    assert words in message
    assert name in message
    assert key in str(exc.value)


def test_every_unknown_option_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as exc:
        BUILTIN_FACTORIES["AVG"](a=1, b=2)
    assert [p.key for p in exc.value.problems] == ["a", "b"]


# -- registration through the real plugin manager --------------------------------


@pytest.fixture
def fresh_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RMQK_DISABLE_PLUGIN_AUTOLOAD", "RMQK_LOAD_PLUGINS", "RMQK_DISABLED_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_plugin_registers_all_six_java_names(fresh_plugins: None) -> None:
    registry = registries().allocation_strategies
    assert set(registry.names()) >= ALL_NAMES
    for name in ALL_NAMES:
        assert registry.entry(name).plugin == "allocation"
        assert registry.get(name) is BUILTIN_STRATEGIES[name]
    context = AllocationStrategyContext("g")
    assert registry.create("AVG_BY_CIRCLE", context).name == "AVG_BY_CIRCLE"
    nearby = registry.create("MACHINE_ROOM_NEARBY", context, {"inner": "CONSISTENT_HASH"})
    assert nearby.name == "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"
    assert isinstance(nearby, AllocationStrategy)


class _FirstQueueOnly:
    @property
    def name(self) -> str:
        return "FIRST"

    def allocate(
        self,
        group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        return [mq_all[0]] if current_cid == cid_all[0] else []


class _ThirdPartyPlugin:
    @hookimpl
    def rmqk_register_allocation_strategies(self, register: Register) -> None:
        register(PluginFactory("FIRST", lambda context, options: _FirstQueueOnly()))


def test_machine_room_nearby_finds_third_party_inner_strategies(fresh_plugins: None) -> None:
    get_plugin_manager().register(_ThirdPartyPlugin(), name="third-party")
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"](inner="FIRST")
    assert strategy.name == "MACHINE_ROOM_NEARBY-FIRST"
    assert shares(strategy, NEARBY_QUEUES, NEARBY_CIDS) == [[0, 8], [], [4]]

"""Access control for the embedded broker, checked as Apache 4.9's plain ACL does.

``EmbeddedBroker(..., acl=AclConfig(...))`` (or ``acl="plain_acl.toml"``, or
``rmqk broker --acl FILE``) makes the broker check every request before it is
processed, as ``PlainAccessValidator`` and ``PlainPermissionManager`` do:

1. A client whose address matches a global white-list entry passes.
2. Otherwise the request must carry an ``AccessKey`` the config knows.
3. A client whose address matches that account's ``whiteRemoteAddress`` passes.
4. The ``Signature`` must be ``base64(HmacSHA1(secretKey, content))``, where
   ``content`` is the values of every other header field in key order, then the
   body (what the ``acl`` plugin of the client, ``rmqk.plugins.remoting.acl``,
   signs).
5. Admin requests (create or delete a topic or a subscription group, update the
   broker config) need ``admin = true``.
6. Each resource the request touches needs its permission: a send needs PUB on
   its topic; a pull needs SUB on its topic and on its group; a heartbeat needs
   SUB on each subscribed topic and group; an offset commit SUB on its topic and
   group; a send-back SUB on the group. A group is written ``groupPerms`` entry
   ``"g=SUB"`` and stands for the ``%RETRY%g`` resource. A resource not listed
   takes the account's ``defaultTopicPerm`` / ``defaultGroupPerm``. Admin
   accounts without any listed resource may do everything.

Like Apache 4.9.8, a batch send (SEND_BATCH_MESSAGE) is not checked per topic:
its signature and account are, its topic is not. Beyond Apache, a send of any
kind into ``%RETRY%<group>`` needs SUB on ``<group>`` (and, as on Apache, SUB on
the sender's own group): Apache's check reads a field its V1 header does not
have and skips a V2 header without a group, so there anyone could write into
any group's retry queue. A denied request is answered
SYSTEM_ERROR with Apache's remark, ``org.apache.rocketmq.acl.common.AclException:
<why>, <where>``; nothing of it is processed, so it changes nothing.

The config file has the keys of Apache's ``plain_acl.yml``, written as TOML
(``.toml``) or JSON (``.json``), since YAML is not a dependency::

    globalWhiteRemoteAddresses = ["10.10.103.*"]

    [[accounts]]
    accessKey = "RocketMQ"
    secretKey = "12345678"
    whiteRemoteAddress = ""
    admin = false
    defaultTopicPerm = "DENY"
    defaultGroupPerm = "SUB"
    topicPerms = ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
    groupPerms = ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]

Secret keys are never logged, shown in a repr or put in an error message.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rmqk.model import RETRY_GROUP_TOPIC_PREFIX
from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.wire.protocol import RemotingCommand, RequestCode

__all__ = [
    "DENY",
    "PUB",
    "SUB",
    "AccessValidator",
    "AclAccount",
    "AclConfig",
    "AclDenied",
    "load_acl_config",
    "parse_perm",
]

log = logging.getLogger("rmqk.broker.acl")

# org.apache.rocketmq.acl.common.Permission
DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3
_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}

# Permission.ADMIN_CODE: UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG,
# DELETE_TOPIC_IN_BROKER, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP.
ADMIN_CODES = frozenset({17, 25, 215, 200, 207})

# Left out of the signed content: SessionCredentials.SIGNATURE, MixAll.UNIQUE_MSG_QUERY_FLAG.
_UNSIGNED = frozenset({"Signature", "_UNIQUE_KEY_QUERY"})
# The stack frame RemotingHelper.exceptionSimpleDesc adds to the remark, per failure.
_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"
_MANAGER = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
_AT_NO_KEY = f"{_MANAGER}.validate(PlainPermissionManager.java:664)"
_AT_UNKNOWN_KEY = f"{_MANAGER}.validate(PlainPermissionManager.java:668)"
_AT_SIGNATURE = f"{_MANAGER}.validate(PlainPermissionManager.java:684)"
_AT_ADMIN = f"{_MANAGER}.checkPerm(PlainPermissionManager.java:581)"
_AT_DEFAULT_PERM = f"{_MANAGER}.checkPerm(PlainPermissionManager.java:606)"
_AT_PERM = f"{_MANAGER}.checkPerm(PlainPermissionManager.java:611)"
_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
# AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: keys must be longer.
_KEY_MIN_LENGTH = 6
_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


def parse_perm(text: str | None) -> int:
    """Permission.parsePermFromString: PUB, SUB, PUB|SUB (or SUB|PUB), DENY; anything else DENY."""
    if text is None:
        return DENY
    return _PERMS.get(text.strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & PUB or owned & SUB)
    return bool(needed & owned)


# ----------------------------------------------------------------------------- addresses


class _AddressPattern:
    """One white-list entry (RemoteAddressStrategyFactory), IPv4 patterns and exact IPv6.

    ``*`` (or ``*.*.*.*``) matches every address; a blank entry matches none;
    ``a.b.c.d`` one; ``a,b,c`` any of a list; ``a.b.c.{1,2,3}`` any last octet of
    a set; ``a.b.*.*`` and ``a.b.c.10-20`` octet wildcards and ranges.
    """

    def __init__(self, text: str | None) -> None:
        self.text = (text or "").strip()
        self._any = self.text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")
        self._exact: frozenset[str] = frozenset()
        self._octets: list[tuple[int, int]] | None = None
        if not self.text or self._any:
            return
        if self.text.endswith("}"):
            head, brace, rest = self.text.rpartition("{")
            if not brace or not head.endswith("."):
                raise ValueError(f"{self.text!r}: expected a.b.c.{{x,y}}")
            self._exact = frozenset(_ip(head + part.strip()) for part in rest[:-1].split(","))
        elif "," in self.text:
            self._exact = frozenset(_ip(part.strip()) for part in self.text.split(","))
        elif "*" in self.text or "-" in self.text:
            parts = self.text.split(".")
            if len(parts) != 4:
                raise ValueError(f"{self.text!r}: an IPv4 pattern has 4 parts")
            self._octets = [_octet_range(p.strip(), self.text) for p in parts]
        else:
            self._exact = frozenset({_ip(self.text)})

    def match(self, host: str) -> bool:
        if self._any:
            return True
        if not self.text:
            return False
        if self._octets is not None:
            parts = host.split(".")
            if len(parts) != 4 or not all(p.isdigit() for p in parts):
                return False
            return all(lo <= int(p) <= hi for p, (lo, hi) in zip(parts, self._octets, strict=True))
        try:
            return _ip(host) in self._exact
        except ValueError:
            return False


def _ip(text: str) -> str:
    return str(ipaddress.ip_address(text.strip().strip("[]")))


def _octet_range(part: str, whole: str) -> tuple[int, int]:
    if part == "*":
        return 0, 255
    lo_text, dash, hi_text = part.partition("-")
    try:
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
    except ValueError:
        raise ValueError(f"{whole!r}: {part!r} is not a number, a range a-b or *") from None
    if not 0 <= lo <= hi <= 255:
        raise ValueError(f"{whole!r}: {part!r} is not within 0-255")
    return lo, hi


def _host_of(remote_addr: str) -> str:
    host = remote_addr.rpartition(":")[0] if ":" in remote_addr else remote_addr
    return host.strip("[]").lstrip("/")


# ----------------------------------------------------------------------------- config


def _texts(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(repr=False)
class AclAccount:
    """One entry of ``accounts`` (PlainAccessConfig); perms are ``"resource=PERM"`` strings."""

    access_key: str
    secret_key: str
    white_remote_address: str = ""
    admin: bool = False
    default_topic_perm: str = "DENY"
    default_group_perm: str = "DENY"
    topic_perms: tuple[str, ...] = attrs.field(default=(), converter=_texts)
    group_perms: tuple[str, ...] = attrs.field(default=(), converter=_texts)

    def __repr__(self) -> str:
        return (
            f"AclAccount(access_key={self.access_key!r}, secret_key=***, admin={self.admin}, "
            f"default_topic_perm={self.default_topic_perm!r}, "
            f"default_group_perm={self.default_group_perm!r}, topic_perms={self.topic_perms!r}, "
            f"group_perms={self.group_perms!r})"
        )


def _accounts(values: Iterable[AclAccount]) -> tuple[AclAccount, ...]:
    return tuple(values)


@attrs.frozen
class AclConfig:
    """The accounts and the global white list (Apache's plain_acl.yml)."""

    accounts: tuple[AclAccount, ...] = attrs.field(converter=_accounts)
    global_white_remote_addresses: tuple[str, ...] = attrs.field(default=(), converter=_texts)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "<acl>") -> AclConfig:
        """From a parsed document with plain_acl.yml's keys; ConfigError lists every problem."""
        problems: list[ConfigProblem] = []

        def problem(table: str, key: str | None, message: str) -> None:
            problems.append(ConfigProblem(where, table, key, message))

        known_top = {"globalWhiteRemoteAddresses", "accounts"}
        for key in data:
            if key not in known_top:
                problem("", str(key), "unknown key; known: accounts, globalWhiteRemoteAddresses")
        white = data.get("globalWhiteRemoteAddresses", [])
        if not isinstance(white, list) or not all(isinstance(w, str) for w in white):
            problem("", "globalWhiteRemoteAddresses", "must be a list of address patterns")
            white = []
        for entry in white:
            try:
                _AddressPattern(entry)
            except ValueError as exc:
                problem("", "globalWhiteRemoteAddresses", f"bad address pattern {exc}")
        raw_accounts = data.get("accounts", [])
        if not isinstance(raw_accounts, list):
            problem("", "accounts", "must be a list of tables ([[accounts]])")
            raw_accounts = []
        accounts: list[AclAccount] = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_accounts):
            table = f"accounts[{i}]"
            if not isinstance(raw, Mapping):
                problem(table, None, "must be a table")
                continue
            account = _account(raw, table, problem)
            if account is None:
                continue
            if account.access_key in seen:
                problem(table, "accessKey", f"{account.access_key!r} is used by an earlier account")
                continue
            seen.add(account.access_key)
            accounts.append(account)
        if problems:
            raise ConfigError(problems)
        return cls(tuple(accounts), tuple(white))


_ACCOUNT_KEYS = {
    "accessKey": "access_key",
    "secretKey": "secret_key",
    "whiteRemoteAddress": "white_remote_address",
    "admin": "admin",
    "defaultTopicPerm": "default_topic_perm",
    "defaultGroupPerm": "default_group_perm",
    "topicPerms": "topic_perms",
    "groupPerms": "group_perms",
}


def _account(
    raw: Mapping[str, Any], table: str, problem: Callable[[str, str | None, str], None]
) -> AclAccount | None:
    ok = True
    for key in raw:
        if key not in _ACCOUNT_KEYS:
            problem(table, str(key), "unknown key; known: " + ", ".join(_ACCOUNT_KEYS))
            ok = False
    values: dict[str, Any] = {}
    for key in ("accessKey", "secretKey"):
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # YAML's 12345678 is a number; Apache reads it as text
        if not isinstance(value, str) or len(value) <= _KEY_MIN_LENGTH:
            # Never echo a secret: say what is wrong with it, not what it is.
            problem(table, key, f"must be a string longer than {_KEY_MIN_LENGTH} characters")
            ok = False
        else:
            values[_ACCOUNT_KEYS[key]] = value
    white = raw.get("whiteRemoteAddress")
    if white is not None:
        if not isinstance(white, str):
            problem(table, "whiteRemoteAddress", "must be an address pattern")
            ok = False
        else:
            try:
                _AddressPattern(white)
                values["white_remote_address"] = white
            except ValueError as exc:
                problem(table, "whiteRemoteAddress", f"bad address pattern {exc}")
                ok = False
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        problem(table, "admin", "must be true or false")
        ok = False
    values["admin"] = admin is True
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        perm = raw.get(key)
        if perm is None:
            continue
        if not isinstance(perm, str) or perm.strip() not in _PERMS:
            problem(table, key, "must be one of PUB, SUB, PUB|SUB, DENY")
            ok = False
        else:
            values[_ACCOUNT_KEYS[key]] = perm.strip()
    for key in ("topicPerms", "groupPerms"):
        entries = raw.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            problem(table, key, 'must be a list of "resource=PERM" strings')
            ok = False
            continue
        for entry in entries:
            name, sep, perm = entry.partition("=")
            if not sep or not name.strip() or perm.strip() not in _PERMS:
                problem(
                    table,
                    key,
                    f"{entry!r} is not resource=PERM with PERM one of PUB, SUB, PUB|SUB, DENY",
                )
                ok = False
        values[_ACCOUNT_KEYS[key]] = tuple(entries)
    if not ok:
        return None
    return AclAccount(**values)


def load_acl_config(path: str | os.PathLike[str]) -> AclConfig:
    """Read an ACL file: ``.toml`` or ``.json`` with plain_acl.yml's keys."""
    where = os.fspath(path)
    suffix = Path(where).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(
            [ConfigProblem(where, "", None, "an ACL file must be .toml or .json (plain_acl keys)")]
        )
    try:
        data = Path(where).read_bytes()
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem(where, "", None, f"cannot read the file: {exc.strerror or exc}")]
        ) from None
    try:
        text = data.decode("utf-8")
        document = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
        # The parser's message may quote the line, and the line may hold a secret.
        kind = "TOML" if suffix == ".toml" else "JSON"
        message = f"invalid {kind}" + _position(exc)
        raise ConfigError([ConfigProblem(where, "", None, message)]) from None
    if not isinstance(document, Mapping):
        raise ConfigError([ConfigProblem(where, "", None, "must be a table/object at the top")])
    return AclConfig.from_mapping(document, where)


def _position(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f" at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f": not UTF-8 (byte {exc.start})"
    text = str(exc)
    at = text.rfind("(at line")
    return " " + text[at:] if at >= 0 else ""


# ----------------------------------------------------------------------------- checking


@attrs.frozen
class AclDenied:
    """Why a request was refused, and the remark Apache's broker answers with."""

    message: str
    at: str

    @property
    def remark(self) -> str:
        return f"{_EXCEPTION}: {self.message}, {self.at}"


class _Owned:
    """An account, compiled for checking (PlainAccessResource of the config)."""

    __slots__ = ("account", "default_group", "default_topic", "perms", "white")

    def __init__(self, account: AclAccount) -> None:
        self.account = account
        self.white = _AddressPattern(account.white_remote_address)
        self.default_topic = parse_perm(account.default_topic_perm)
        self.default_group = parse_perm(account.default_group_perm)
        perms: dict[str, int] = {}
        for entry in account.group_perms:
            name, _, perm = entry.partition("=")
            perms[RETRY_GROUP_TOPIC_PREFIX + name.strip()] = parse_perm(perm)
        for entry in account.topic_perms:
            name, _, perm = entry.partition("=")
            perms[name.strip()] = parse_perm(perm)
        self.perms = perms


class AccessValidator:
    """Checks requests against an :class:`AclConfig` (PlainAccessValidator + manager)."""

    def __init__(self, config: AclConfig) -> None:
        self.config = config
        self._global_white = [_AddressPattern(w) for w in config.global_white_remote_addresses]
        self._accounts = {a.access_key: _Owned(a) for a in config.accounts}

    def check(self, request: RemotingCommand, remote_addr: str) -> AclDenied | None:
        """None when ``request`` from ``remote_addr`` may be processed, else why not."""
        host = _host_of(remote_addr)
        try:
            needed = _resources(request)
        except _ParseError as exc:
            return AclDenied(str(exc), _PARSE)
        if any(w.match(host) for w in self._global_white):
            return None
        fields = request.ext_fields
        access_key = fields.get("AccessKey")
        if access_key is None:
            return AclDenied("No accessKey is configured", _AT_NO_KEY)
        owned = self._accounts.get(access_key)
        if owned is None:
            return AclDenied(f"No acl config for {access_key}", _AT_UNKNOWN_KEY)
        if owned.white.match(host):
            return None
        if not _signature_ok(request, owned.account.secret_key):
            return AclDenied(f"Check signature failed for accessKey={access_key}", _AT_SIGNATURE)
        if needed.get(_TRACE_TOPIC) == PUB:
            return None  # message traces may always be published
        return _check_perm(request.code, needed, owned)


class _ParseError(Exception):
    pass


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY_GROUP_TOPIC_PREFIX + group


def _resources(request: RemotingCommand) -> dict[str, int]:
    """The resources a request touches and the permission each needs (parse)."""
    f = request.ext_fields
    code = request.code
    needed: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource is not None:
            needed[resource] = perm

    def required(name: str) -> str:
        value = f.get(name)
        if value is None:
            raise _ParseError(f"the custom field <{name}> is null")
        return value

    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        # SEND_MESSAGE_V2 has short field names: b is the topic, a the producer group.
        v1 = code == RequestCode.SEND_MESSAGE
        topic = f.get("topic" if v1 else "b")
        if topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # Apache adds SUB on the group its header names, but reads a V1 send's
            # group from "group", a field SendMessageRequestHeader does not have, and
            # a V2 send may leave "a" out: either way it checks no group. Here the
            # sender's group is read where the header keeps it, and the group whose
            # retry queue is written (the topic itself) needs SUB as well.
            add(_retry(f.get("producerGroup", f.get("group")) if v1 else f.get("a")), SUB)
            add(topic, SUB)
        else:
            add(topic, PUB)
    elif code == RequestCode.SEND_BATCH_MESSAGE:
        # Apache 4.9.8 checks no resource of a batch; one into a retry queue still
        # needs SUB on that queue's group.
        topic = f.get("b")
        if topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            add(topic, SUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(_retry(f.get("group")), SUB)
    elif code == RequestCode.PULL_MESSAGE:
        add(f.get("topic"), SUB)
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(f.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        for group, topics in _heartbeat_subscriptions(request.body):
            add(_retry(group), SUB)
            for topic in topics:
                add(topic, SUB)
    elif code == RequestCode.UNREGISTER_CLIENT:
        required("clientID")
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
        add(_retry(required("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        group = required("consumerGroup")
        topic = required("topic")
        required("queueId")
        required("commitOffset")
        add(_retry(group), SUB)
        add(topic, SUB)
    return needed


def _heartbeat_subscriptions(body: bytes) -> list[tuple[str, list[str]]]:
    from rmqk.plugins.broker.clients import parse_heartbeat
    from rmqk.wire import jsonwire

    try:
        heartbeat = parse_heartbeat(jsonwire.loads(body))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise _ParseError(
            f"com.alibaba.fastjson.JSONException: bad HeartbeatData ({exc})"
        ) from None
    return [(c.group, [s.topic for s in c.subscriptions]) for c in heartbeat.consumers]


def _signature_ok(request: RemotingCommand, secret_key: str) -> bool:
    from rmqk.wire.signature import calculate_signature, signature_content

    given = request.ext_fields.get("Signature")
    if given is None:
        return False
    fields = {k: v for k, v in request.ext_fields.items() if k not in _UNSIGNED}
    expected = calculate_signature(signature_content(fields, request.body), secret_key)
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))


def _check_perm(code: int, needed: Mapping[str, int], owned: _Owned) -> AclDenied | None:
    account = owned.account
    if code in ADMIN_CODES and not account.admin:
        return AclDenied(
            f"Need admin permission for request code={code}, "
            f"but accessKey={account.access_key} is not",
            _AT_ADMIN,
        )
    if not needed:
        return None
    if not owned.perms and account.admin:
        return None
    for resource, perm in needed.items():
        is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
        shown = (
            f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX):]}" if is_group else f"topic:{resource}"
        )
        if resource not in owned.perms:
            default = owned.default_group if is_group else owned.default_topic
            if not check_permission(perm, default):
                return AclDenied(f"No default permission for {shown}", _AT_DEFAULT_PERM)
        elif not check_permission(perm, owned.perms[resource]):
            return AclDenied(f"No default permission for {shown}", _AT_PERM)
    return None


def acl_from_option(value: AclConfig | str | os.PathLike[str] | None) -> AccessValidator | None:
    """What ``EmbeddedBroker(acl=...)`` takes: a config, a file path, or None (no ACL)."""
    if value is None:
        return None
    if isinstance(value, AclConfig):
        return AccessValidator(value)
    return AccessValidator(load_acl_config(value))


def describe_accounts(accounts: Sequence[AclAccount]) -> str:
    """A one-line summary for logs: access keys and roles, never secrets."""
    return ", ".join(f"{a.access_key}{' (admin)' if a.admin else ''}" for a in accounts)

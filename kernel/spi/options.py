"""Declaring options and checking values against the declarations.

One option is an :class:`OptionSpec`: name, type, default, allowed range or
choices, doc. A set of options is a frozen attrs class whose fields are made by
:func:`option`; :func:`parse_options` resolves a mapping (a TOML table, keyword
arguments) into an instance of that class and lists every problem, each naming
the file, the table and the key through a :class:`Where`. The consumer options
(:mod:`rmqk.options.consumer`) and every built-in plugin's options table are
declared this way, and the reference pages are generated from the declarations.
"""

from __future__ import annotations

import enum
import importlib
import os
import re
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.spi.option_text import (
    describe_value,
    render_key,
    render_value,
    suggest,
    unknown_key_message,
)

__all__ = [
    "GIVEN_KEYS",
    "JAVA_INT_MAX",
    "JAVA_LONG_MAX",
    "SECRET_TEXT",
    "TIMESTAMP_FORMAT",
    "OptionInvalid",
    "OptionSpec",
    "OptionType",
    "Where",
    "check_timestamp",
    "convert_values",
    "declared_options",
    "describe_value",
    "freeze",
    "hidden_repr",
    "is_wildcard",
    "load_object",
    "load_options",
    "option",
    "option_specs",
    "parse_options",
    "plugin_unknown_key_message",
    "rehome",
    "thaw",
    "unknown_key_message",
]

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
TIMESTAMP_FORMAT = "yyyyMMddHHmmss"
_TIMESTAMP_RE = re.compile(r"[0-9]{14}")

_SPEC = "rmqk.option"
# The field an options class may declare to learn which keys its table gave
# (for a check across options, such as "only used with body_format = 'json'").
GIVEN_KEYS = "given_keys"
T = TypeVar("T")


class OptionType(enum.Enum):
    INT = "integer"
    FLOAT = "number"
    BOOL = "boolean"
    STR = "string"
    ENUM = "enum"
    TIMESTAMP = "timestamp"
    ADDRESSES = "addresses"
    PLUGIN = "plugin name"
    TABLE = "table"
    STR_LIST = "list of strings"
    PATH = "path"
    REGEX = "regular expression"
    OBJECT = "import path"
    ANY = "any"


class OptionInvalid(ValueError):
    """A value an option does not accept; the text says what is allowed.

    Raised by a converter or by an option's ``check``. ``at`` is appended to the
    option's key, so a check of a list can point at one item (``"[2].topic"``).
    """

    def __init__(self, message: str, at: str = "") -> None:
        super().__init__(message)
        self.at = at


@attrs.frozen
class OptionSpec:
    """One option: everything needed to validate and document it."""

    name: str
    value_type: OptionType
    doc: str
    default: Any = None
    default_text: str | None = None
    java_name: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    # Values allowed outside [minimum, maximum], such as -1 for "no limit".
    special: Mapping[int, str] = attrs.field(factory=dict, converter=MappingProxyType, hash=False)
    # Java's checkConfig enforces the range; otherwise the range is rmqk's own.
    java_checked: bool = False
    enum_type: type[enum.Enum] | None = None
    plugin_kind: str | None = None
    unit: str | None = None
    nullable: bool = False
    # The strings a STR option accepts (an ENUM option's come from its enum).
    allowed: tuple[str, ...] = ()
    # Set for a required option: what to give, said when the key is missing.
    required: str | None = None
    # Run on the converted value; returns the value to keep or raises OptionInvalid.
    check: Callable[[Any], Any] | None = attrs.field(default=None, eq=False, hash=False)
    # Set for an option accepted only so Java settings carry over: why it has no
    # effect (the reference shows it, and the option audit test requires either
    # this or a test showing the option's effect).
    compat_only: str | None = None
    # A secret (an ACL secret key, a security token): its value is never shown, not in
    # a repr, an error message, `rmqk check` output, a log or a status report.
    secret: bool = False
    # The attribute of the options class; the name is the key in the table.
    attr: str = ""

    @property
    def choices(self) -> tuple[str, ...]:
        if self.enum_type is not None:
            return tuple(m.name for m in self.enum_type)
        return self.allowed

    @property
    def range_text(self) -> str | None:
        if self.minimum is None:
            return None
        if self.maximum is None:
            return f">= {self.minimum}"
        text = f"[{self.minimum}, {self.maximum}]"
        if self.special:
            alts = ", ".join(f"{v} ({why})" for v, why in self.special.items())
            text = f"{text} or {alts}"
        return text

    @property
    def default_repr(self) -> str:
        """The default as the config reference shows it."""
        if self.default_text is not None:
            return self.default_text
        if self.required is not None:
            return "(required)"
        return render_value(self.default)

    def convert(self, value: object) -> Any:
        """The resolved value for ``value``, or :class:`OptionInvalid` saying what is allowed."""
        if self.secret:
            return _convert_secret(self, value)
        converted = _CONVERTERS[self.value_type](self, value)
        if self.check is not None and converted is not None:
            converted = self.check(converted)
        return converted


def _convert_int(spec: OptionSpec, value: object) -> int:
    lo, hi = spec.minimum, spec.maximum
    bound = f" >= {lo}" if lo is not None and hi is None else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionInvalid(f"must be an integer{bound}, got {describe_value(value)}")
    if value in spec.special:
        return value
    if lo is not None and hi is None and value < lo:
        raise OptionInvalid(f"must be an integer{bound}, got {value}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise OptionInvalid(f"{spec.name} Out of range {spec.range_text}, got {value}")
    return value


def _convert_secret(spec: OptionSpec, value: object) -> str | None:
    # The value is not described in the error: a mistyped secret is still a secret.
    if value is None and spec.nullable:
        return None
    if not isinstance(value, str) or not value.strip():
        kind = type(value).__name__
        raise OptionInvalid(f"must be a non-empty string (the value given, a {kind}, is not shown)")
    return value


SECRET_TEXT = "(set, not shown)"


def hidden_repr(value: object) -> str:
    """How a secret option's value appears in a repr."""
    return "None" if value is None else "'***'"


def _convert_float(spec: OptionSpec, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionInvalid(f"must be a number, got {describe_value(value)}")
    lo, hi = spec.minimum, spec.maximum
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise OptionInvalid(f"must be in {spec.range_text}, got {value}")
    return float(value)


def _convert_bool(spec: OptionSpec, value: object) -> bool:
    if not isinstance(value, bool):
        raise OptionInvalid(f"must be true or false, got {describe_value(value)}")
    return value


def _convert_str(spec: OptionSpec, value: object) -> str | None:
    if value is None and spec.nullable:
        return None
    if spec.allowed:
        if value not in spec.allowed:
            raise OptionInvalid(f"must be one of {', '.join(spec.allowed)}, got {value!r}")
        return str(value)
    if not isinstance(value, str):
        raise OptionInvalid(f"must be a string, got {describe_value(value)}")
    if not value.strip():
        raise OptionInvalid("must not be empty")
    return value


def _convert_enum(spec: OptionSpec, value: object) -> enum.Enum:
    assert spec.enum_type is not None
    if isinstance(value, spec.enum_type):
        return value
    allowed = ", ".join(spec.choices)
    if not isinstance(value, str):
        raise OptionInvalid(f"must be one of {allowed}; got {describe_value(value)}")
    try:
        return spec.enum_type[value]
    except KeyError:
        pass
    hint = suggest(value, spec.choices, case_insensitive=True)
    raise OptionInvalid(f"{value!r} is not allowed; allowed: {allowed}{hint}")


def _convert_timestamp(spec: OptionSpec, value: object) -> str:
    if not isinstance(value, str):
        raise OptionInvalid(
            f'must be a string in the format {TIMESTAMP_FORMAT} (e.g. "20240131235959"), '
            f"got {describe_value(value)}"
        )
    problem = check_timestamp(value)
    if problem:
        raise OptionInvalid(problem)
    return value


def check_timestamp(value: str) -> str | None:
    """What is wrong with a consume timestamp, or None (checkConfig's parse)."""
    bad = (
        f"consume_timestamp is invalid, the valid format is {TIMESTAMP_FORMAT}, "
        f"but received {value!r}"
    )
    if not _TIMESTAMP_RE.fullmatch(value):
        return bad
    try:
        datetime.strptime(value, "%Y%m%d%H%M%S")
    except ValueError as exc:
        return f"{bad} ({exc})"
    return None


def _convert_addresses(spec: OptionSpec, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        parts = value.split(";")
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise OptionInvalid(
            "must be a string of host:port addresses separated by ';' or a list of "
            f"host:port strings, got {describe_value(value)}"
        )
    addrs = [p.strip() for p in parts if p.strip()]
    if not addrs:
        raise OptionInvalid('names no address; give host:port, e.g. "127.0.0.1:9876"')
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise OptionInvalid(
                f'{addr!r} is not host:port with a port in [1, 65535], e.g. "127.0.0.1:9876"'
            )
    return tuple(addrs)


def _convert_plugin(spec: OptionSpec, value: object) -> str | None:
    if value is None and spec.nullable:
        return None
    if not isinstance(value, str) or not value.strip():
        raise OptionInvalid(
            f"must be the name of a registered {spec.plugin_kind}, got {describe_value(value)}"
        )
    return value


def _convert_table(spec: OptionSpec, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise OptionInvalid(f"must be a table, got {describe_value(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise OptionInvalid(f"keys must be strings, got {bad[0]!r}")
    frozen: Mapping[str, Any] = freeze(value)
    return frozen


def _convert_str_list(spec: OptionSpec, value: object) -> tuple[str, ...]:
    # Python callers may pass any sequence or set; TOML gives a list.
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise OptionInvalid(f"must be a list of strings, got {value!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise OptionInvalid(f"must be a non-empty string, got {item!r}", at=f"[{i}]")
    return tuple(value)


def _convert_path(spec: OptionSpec, value: object) -> str | None:
    if value is None and spec.nullable:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise OptionInvalid(f"must be a non-empty path, got {value!r}")
    return str(os.fspath(value))


def _convert_regex(spec: OptionSpec, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise OptionInvalid(f"must be a regular expression (non-empty), got {value!r}")
    try:
        re.compile(value)
    except re.error as exc:
        raise OptionInvalid(f"is not a valid regular expression ({exc}): {value!r}") from None
    return value


def _convert_object(spec: OptionSpec, value: object) -> object:
    return load_object(value)


def _convert_any(spec: OptionSpec, value: object) -> object:
    return freeze(value)


_CONVERTERS: dict[OptionType, Callable[[OptionSpec, object], Any]] = {
    OptionType.INT: _convert_int,
    OptionType.FLOAT: _convert_float,
    OptionType.BOOL: _convert_bool,
    OptionType.STR: _convert_str,
    OptionType.ENUM: _convert_enum,
    OptionType.TIMESTAMP: _convert_timestamp,
    OptionType.ADDRESSES: _convert_addresses,
    OptionType.PLUGIN: _convert_plugin,
    OptionType.TABLE: _convert_table,
    OptionType.STR_LIST: _convert_str_list,
    OptionType.PATH: _convert_path,
    OptionType.REGEX: _convert_regex,
    OptionType.OBJECT: _convert_object,
    OptionType.ANY: _convert_any,
}


def load_object(spec: object) -> object:
    """What ``spec`` names: ``"package.module:attribute"`` or ``"package.module"``.

    Python callers may pass the object itself; anything that is not a string is
    returned unchanged. Raises :class:`OptionInvalid` saying what went wrong.
    """
    if not isinstance(spec, str):
        return spec
    module_name, _, attribute = spec.partition(":")
    if not module_name or (":" in spec and not attribute):
        raise OptionInvalid(f"must look like 'package.module:attribute', got {spec!r}")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptionInvalid(f"cannot import module {module_name!r}: {exc}") from exc
    for part in attribute.split(".") if attribute else ():
        try:
            target = getattr(target, part)
        except AttributeError:
            raise OptionInvalid(f"module {module_name!r} has no attribute {attribute!r}") from None
    return target


def freeze(value: Any) -> Any:
    """A read-only deep copy: tables become mapping proxies, arrays tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain dicts and lists again, for JSON."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    return value


# -- declaring ------------------------------------------------------------------------


def option(
    value_type: OptionType,
    doc: str,
    default: Any = None,
    *,
    factory: Callable[[], Any] | None = None,
    **spec: Any,
) -> Any:
    """An attrs field that declares one option; the keywords are :class:`OptionSpec`'s.

    Use it for every field of a frozen attrs class; :func:`parse_options` then
    resolves a mapping into that class. The option's key in a table is the
    field's name unless ``name`` says otherwise (``name="startingOffsets"``).
    A name ending in ``.*`` (``name="spark.*"``) takes every key under that prefix,
    a dotted key or a nested table alike; the field holds a read-only mapping of
    each leaf's dotted key to its value, each value converted by this spec.
    A class that declares ``given_keys: frozenset[str] = attrs.field(factory=frozenset)``
    (no option) learns from :func:`parse_options` which keys its table gave, for a
    check across options. Mypy and ruff see an ``attrs.field`` of type Any (RUF009
    may need a noqa on fields whose default is a call).
    """
    name = spec.pop("name", "")
    meta = {_SPEC: OptionSpec(name=name, value_type=value_type, doc=doc, default=default, **spec)}
    hashable = value_type not in (OptionType.TABLE, OptionType.ANY)
    shown: Callable[[Any], str] | bool = hidden_repr if spec.get("secret") else True
    if factory is not None:
        return attrs.field(factory=factory, metadata=meta, hash=hashable, repr=shown)
    return attrs.field(default=default, metadata=meta, hash=hashable, repr=shown)


_SPECS_CACHE: dict[type, Mapping[str, OptionSpec]] = {}


def declared_options(cls: type) -> tuple[OptionSpec, ...]:
    """The options ``cls`` declares, as a plugin factory's ``option_specs`` holds them.

    A factory (of any plugin kind) with ``option_specs`` has its options table
    checked against them by the kernel, in ``rmqk check`` and ``rmqk run``.
    """
    return tuple(option_specs(cls).values())


def option_specs(cls: type) -> Mapping[str, OptionSpec]:
    """The options ``cls`` declares, by name, in declaration order."""
    cached = _SPECS_CACHE.get(cls)
    if cached is None:
        specs = {}
        for field in attrs.fields(cls):
            spec: OptionSpec | None = field.metadata.get(_SPEC)
            if spec is not None:
                name = spec.name or field.name
                specs[name] = attrs.evolve(spec, name=name, attr=field.name)
        cached = _SPECS_CACHE[cls] = MappingProxyType(specs)
    return cached


# -- where options come from ---------------------------------------------------------


@attrs.frozen
class Where:
    """Where options came from, for the problems found in them.

    ``path`` is the file (or a placeholder such as ``"<sink_options>"`` that the
    caller replaces when it knows the file), ``table`` the dotted table, and
    ``prefix`` starts every message, e.g. with the plugin's name.
    """

    path: str
    table: str = ""
    prefix: str = ""

    def problem(self, key: str | None, message: str) -> ConfigProblem:
        return ConfigProblem(self.path, self.table, key, f"{self.prefix}{message}")

    def nested(self, key: str) -> Where:
        """The table ``key`` inside this one (``consumers.orders`` -> ``.sink_options``)."""
        table = f"{self.table}.{render_key(key)}" if self.table else render_key(key)
        return attrs.evolve(self, table=table)


# -- parsing ------------------------------------------------------------------------


def plugin_unknown_key_message(key: str, known: Collection[str]) -> str:
    """How a plugin's options table rejects a key it does not declare."""
    hint = suggest(key, known)
    takes = ", ".join(known) if known else "no options"
    return f"unknown option{hint}; allowed: {takes}"


def convert_values(
    specs: Mapping[str, OptionSpec],
    mapping: Mapping[str, Any],
    where: Where,
    *,
    unknown: Callable[[str, Collection[str]], str] = plugin_unknown_key_message,
    text: bool = False,
) -> tuple[dict[str, Any], list[ConfigProblem]]:
    """Each given value converted by its spec, and a problem for every bad or unknown key.

    With ``text``, a string given for a number or boolean is read as one first.
    """
    problems: list[ConfigProblem] = []
    values: dict[str, Any] = {}
    # Keys a wildcard spec ("spark.*") takes, each leaf under its dotted key.
    collected: dict[str, dict[str, Any]] = {}
    for key, raw in mapping.items():
        spec = specs.get(key)
        if spec is None:
            wildcard = _wildcard_for(specs, str(key))
            if wildcard is not None:
                _flatten(str(key), raw, collected.setdefault(wildcard.name, {}))
                continue
            problems.append(where.problem(str(key), unknown(str(key), list(specs))))
            continue
        if text and isinstance(raw, str):
            raw = _from_text(spec, raw)
        try:
            values[key] = spec.convert(raw)
        except OptionInvalid as exc:
            problems.append(where.problem(f"{key}{exc.at}", str(exc)))
    for name, leaves in collected.items():
        spec = specs[name]
        converted: dict[str, Any] = {}
        for key, raw in leaves.items():
            try:
                converted[key] = spec.convert(raw)
            except OptionInvalid as exc:
                problems.append(where.problem(f"{key}{exc.at}", str(exc)))
        values[name] = MappingProxyType(converted)
    for name, spec in specs.items():
        if spec.required is not None and name not in mapping:
            problems.append(where.problem(name, f"required key is missing: {spec.required}"))
    return values, problems


def is_wildcard(spec: OptionSpec) -> bool:
    """Whether ``spec`` takes every key under a prefix (its name ends with ``.*``)."""
    return spec.name.endswith(".*")


def _wildcard_for(specs: Mapping[str, OptionSpec], key: str) -> OptionSpec | None:
    """The wildcard spec (``spark.*``) taking ``key``: ``spark.x`` or a ``spark`` table."""
    for spec in specs.values():
        if is_wildcard(spec):
            stem = spec.name[:-2]
            if key == stem or key.startswith(f"{stem}."):
                return spec
    return None


def _flatten(key: str, value: object, out: dict[str, Any]) -> None:
    # TOML's dotted keys: spark.sql.x = 1 and "spark.sql.x" = 1 are one setting.
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{key}.{k}", v, out)
    else:
        out[key] = value


def _from_text(spec: OptionSpec, raw: str) -> object:
    text = raw.strip()
    try:
        if spec.value_type is OptionType.INT:
            return int(text)
        if spec.value_type is OptionType.FLOAT:
            return float(text)
    except ValueError:
        return raw
    if spec.value_type is OptionType.BOOL:
        return {"true": True, "false": False}.get(text.lower(), raw)
    return raw


def parse_options(
    cls: type[T], mapping: object, where: Where, *, text: bool = False
) -> tuple[T, list[ConfigProblem]]:
    """Resolve ``mapping`` into the options class ``cls`` (declared with :func:`option`).

    Returns the options, with defaults for keys not given and for keys whose
    value was rejected, and every problem found; the options are only meaningful
    when there are no problems. ``None`` is an empty table; anything else that
    is not a mapping is one problem. ``text`` is for tables whose values are all
    strings (Spark options, environment variables, command lines): ``"10"`` is
    then accepted for an integer and ``"true"`` for a boolean.
    """
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        problem = where.problem(None, f"options must be a table, got {describe_value(mapping)}")
        return cls(), [problem]
    specs = option_specs(cls)
    values, problems = convert_values(specs, mapping, where, text=text)
    given = {specs[k].attr: v for k, v in values.items()}
    if GIVEN_KEYS in attrs.fields_dict(cls):  # type: ignore[arg-type]
        given[GIVEN_KEYS] = frozenset(str(k) for k in mapping)
    return cls(**given), problems


def load_options(cls: type[T], mapping: object, where: Where, *, text: bool = False) -> T:
    """:func:`parse_options`, raising :class:`ConfigError` with every problem found."""
    options, problems = parse_options(cls, mapping, where, text=text)
    if problems:
        raise ConfigError(problems)
    return options


def rehome(error: ConfigError, path: str, table: str) -> ConfigError:
    """``error`` with placeholder paths (``"<options>"``, ``"<sink_options>"``) filled in.

    A plugin factory does not know the file or the consumer table it was
    configured from; whoever does calls this, so ``<sink_options>`` and table
    ``jsonl`` become ``[consumers.orders.sink_options]`` in ``consumers.toml``,
    the message starting with ``jsonl:``. Other problems are kept as they are.
    """
    out = []
    for p in error.problems:
        inner = p.path[1:-1] if p.path.startswith("<") and p.path.endswith(">") else ""
        if inner != "options" and not inner.endswith("_options"):
            out.append(p)
            continue
        sub = p.table if inner == "options" else inner
        message = p.message if p.table in ("", sub) else f"{p.table}: {p.message}"
        out.append(ConfigProblem(path, f"{table}.{sub}" if sub else table, p.key, message))
    return ConfigError(out)

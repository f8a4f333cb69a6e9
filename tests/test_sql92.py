"""SQL92 selectors against expectations written from Apache 4.9.8's filter module.

Each expected value follows the Java classes: properties are Strings, a
String compared with a number is converted to that number's type (and a
failed conversion throws, which drops the message), ``>`` between two
Strings compares them as doubles, ``=`` is unknown only when its left side is
missing, and only TRUE selects.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqk.plugins.broker.sql92 import EvalError, Sql92Error, compile_selector

ERR = "throws"

MESSAGE = {
    "a": "5",
    "b": "abc",
    "c": "5.5",
    "d": "true",
    "e": "-3",
    "f": "",
    "big": "3000000000",
    "s": "010",
    "t": "TRUE",
    "sp": " 7 ",
    "q": "it's",
}

TABLE: list[tuple[str, object]] = [
    # A String property against an Integer literal converts with Integer.valueOf.
    ("a = 5", True),
    ("a = '5'", True),
    ("a = 5.0", True),
    ("a > 4", True),
    ("a > 5", False),
    ("a >= 5", True),
    ("a < 10", True),
    ("a <= 4", False),
    ("c > 5", ERR),  # Integer.valueOf("5.5") throws
    ("c > 5.0", True),
    ("c = 5.5", True),
    ("b = 'abc'", True),
    ("b = 'ABC'", False),
    ("b <> 'abc'", False),
    ("b <> 'x'", True),
    ("b = 5", ERR),
    # Two String properties are ordered as doubles, or throw.
    ("a > e", True),
    ("b > a", ERR),
    # Missing properties: unknown, except on the right of '='.
    ("missing = 5", None),
    ("missing IS NULL", True),
    ("a IS NULL", False),
    ("a IS NOT NULL", True),
    ("missing IS NOT NULL", False),
    ("missing > 5", None),
    ("NOT (missing > 5)", None),
    ("NOT (a > 5)", True),
    ("5 = missing", False),
    ("NOT (5 = missing)", True),
    ("NOT (missing = 5)", None),
    ("missing = other", True),
    # BETWEEN is >= AND <=, NOT BETWEEN is < OR >.
    ("a BETWEEN 1 AND 5", True),
    ("a BETWEEN 6 AND 9", False),
    ("a NOT BETWEEN 6 AND 9", True),
    ("a NOT BETWEEN 1 AND 5", False),
    ("missing BETWEEN 1 AND 5", None),
    ("missing NOT BETWEEN 1 AND 5", None),
    ("c BETWEEN 5.0 AND 6.0", True),
    ("a BETWEEN -1 AND -5", False),  # negated literals are not constants: no bound check
    # IN takes string literals only.
    ("b IN ('abc', 'x')", True),
    ("b IN ('x')", False),
    ("b NOT IN ('x')", True),
    ("missing IN ('x')", None),
    ("missing NOT IN ('x')", None),
    ("a IN ('5')", True),
    ("b IN ('a', 'b', 'c', 'd', 'abc', 'f')", True),
    ("q = 'it''s'", True),
    # Booleans: a String equals TRUE when it reads "true" in any case.
    ("d = TRUE", True),
    ("t = TRUE", True),
    ("b = TRUE", False),
    ("b = FALSE", True),
    ("TRUE = d", ERR),  # Apache casts the Boolean to String
    ("d", False),  # a bare property is a Boolean cast: a String is FALSE
    ("NOT d", True),
    ("missing", None),
    ("NOT missing", None),
    ("TRUE", True),
    ("FALSE", False),
    ("NULL", None),
    # AND / OR: three-valued, left to right, stopping early.
    ("a = 5 AND b = 'abc'", True),
    ("a = 5 AND missing = 1", None),
    ("a = 6 AND missing = 1", False),
    ("a = 5 OR missing = 1", True),
    ("a = 6 OR missing = 1", None),
    ("b = 'abc' OR b = 5", True),
    ("b = 5 OR b = 'abc'", ERR),
    ("a = 6 AND b = 5", False),
    # Integer / Long literals convert the String with their own range.
    ("big = 3000000000", True),
    ("big > 5", ERR),
    ("big > 5.0", True),
    ("a = 5L", True),
    ("s = 10", True),
    ("s = '10'", False),
    ("sp = 7", ERR),  # Integer.valueOf does not trim
    ("sp = 7.0", True),  # Double.valueOf does
    ("e = -3", True),
    ("e < -2", True),
    ("-a = -5", None),  # a String has no negation
    ("f = ''", True),
    ("f IS NULL", False),
    ("f = 0", ERR),
    ("a = 5 = TRUE", True),
    ("(a > 1) = (b = 'abc')", True),
    # Lexical details: trailing tokens ignored, comments, case-insensitive keywords.
    ("a > 5 trailing words", False),
    ("a > 4 LIMIT 3", True),
    ("a LIKE 'x%'", False),  # parses as the bare property a
    ("a > 4 -- a comment\n", True),
    ("a /* a comment */ > 4", True),
    ("a > 4 -- without a line end the comment is two minus signs, ignored", True),
    ("A = 5", None),  # property names are case-sensitive
    ("a > 4 and b = 'abc'", True),
    ("a > 4 AnD NoT (b = 'x')", True),
    ("1 = 1", True),
    ("1 = 1.0", True),
    ("'x' = 'x'", True),
    # NOT binds to the operand before comparisons, as in Apache's grammar.
    ("NOT a IS NULL", False),
    ("NOT a = 'x'", ERR),
    ("a > +4", True),
    ("c > .5", True),
    ("a > 4e0", True),
    ("x NOT IN ('a','b','c','d','e','f')", None),
]

INVALID: list[tuple[str, str]] = [
    ("a = NULL", "'NULL' cannot be compared."),
    ("NULL = a", "'NULL' cannot be compared."),
    ("a <> NULL", "'NULL' cannot be compared."),
    ("b > 'a'", "Value ''a'' cannot be compared."),
    ("'x' > 'y'", "Value ''x'' cannot be compared."),
    ("a > TRUE", "Value 'TRUE' cannot be compared."),
    ("a > NULL", "Value 'NULL' cannot be compared."),
    ("NOT a > 5", "Value '(NOT a)' cannot be compared."),
    ("(a > 1) > 0", "Value '(a > 1)' cannot be compared."),
    ("5", "Expression will not result in a boolean value: 5"),
    ("'x'", "Expression will not result in a boolean value: 'x'"),
    ("-a", "Expression will not result in a boolean value: (- a)"),
    ("a = 1 AND 5", "Expression will not result in a boolean value: 5"),
    ("a =", 'Encountered "<EOF>" at line 1, column 4.'),
    ("a == 5", 'Encountered "=" at line 1, column 4.'),
    ("a != 5", "Lexical error at line 1, column 3."),
    ("a BETWEEN 5 AND 1", "left value(5) must less than or equal to right value(1)"),
    ("a BETWEEN NULL AND 5", "values can not be null!"),
    ("a BETWEEN 1 AND 'x'", "NumberFormatException"),
    ("a IN (1, 2)", 'Encountered "1"'),
    ("5 IN ('x')", "Expected a property for In expression, got: 5"),
    ("a IN ()", 'Encountered ")"'),
    ("a > 0.0", "0.0 is less than 4.9E-324"),
    ("a > 1e400", "1e400 is greater than 1.7976931348623157E308"),
    ("a > 9223372036854775808", 'For input string: "9223372036854775808"'),
    ("TRUE = 1", "'TRUE' cannot be compared with '1'"),
    ("(a > 1", 'Encountered "<EOF>"'),
    ("a IS 5", 'Encountered "5"'),
    ("a NOT LIKE 'x'", 'Encountered "NOT"'),
    ("", 'Encountered "<EOF>" at line 1, column 1.'),
    ("a > 5 NOT", 'Encountered "NOT"'),
    ("a = 'unterminated", "Lexical error"),
    ("a > 5 /* unterminated", "Lexical error"),
]


def outcome(expression: str, props: dict[str, str]) -> object:
    try:
        return compile_selector(expression).evaluate(props)
    except EvalError:
        return ERR


@pytest.mark.parametrize(("expression", "expected"), TABLE)
def test_table(expression: str, expected: object) -> None:
    assert outcome(expression, MESSAGE) == expected
    # Only TRUE selects; unknown and a thrown error drop the message.
    assert compile_selector(expression).matches(MESSAGE) is (expected is True)


def test_table_is_big_enough() -> None:
    assert len(TABLE) >= 60


@pytest.mark.parametrize(("expression", "reason"), INVALID)
def test_invalid(expression: str, reason: str) -> None:
    with pytest.raises(Sql92Error) as caught:
        compile_selector(expression)
    assert reason in caught.value.remark
    # The remark names the Java exception class, as MQFilterException.getMessage() does.
    assert caught.value.remark.split(":")[0].startswith(("java.lang.", "org.apache.rocketmq."))


def test_the_concepts_page_example() -> None:
    selector = compile_selector("region = 'eu' AND amount > 100.0")
    assert selector.matches({"region": "eu", "amount": "250"})
    assert selector.matches({"region": "eu", "amount": "100.5"})
    assert not selector.matches({"region": "us", "amount": "250"})
    assert not selector.matches({"amount": "250"})
    # With an Integer literal, "100.5" cannot be converted: the message is not selected.
    assert not compile_selector("amount > 100").matches({"amount": "100.5"})


def test_no_properties_at_all() -> None:
    assert compile_selector("a IS NULL").matches(None)
    assert not compile_selector("a = 1").matches(None)


def test_compiled_once() -> None:
    assert compile_selector("a > 1 AND b = 'x'") is compile_selector("a > 1 AND b = 'x'")


def test_deep_nesting_is_refused_not_crashing() -> None:
    with pytest.raises(Sql92Error):
        compile_selector("(" * 20000 + "a" + ")" * 20000)


# -- properties ------------------------------------------------------------------

values = st.one_of(
    st.none(),
    st.integers(-20, 20).map(str),
    st.floats(-20, 20, allow_nan=False).map(str),
    st.sampled_from(["x", "y", "true", "", " 3", "TRUE"]),
)
messages = st.fixed_dictionaries({}, optional={"p": values, "q": values})
literals = st.one_of(
    st.integers(1, 15).map(str),
    st.integers(-15, -1).map(str),
    st.sampled_from(["'x'", "'y'", "'3'", "TRUE", "FALSE", "2.5", "-2.5"]),
)
atoms = st.one_of(
    st.builds(lambda p: f"{p} IS NULL", st.sampled_from("pq")),
    st.builds(lambda p: f"{p} IS NOT NULL", st.sampled_from("pq")),
    st.builds(lambda p, v: f"{p} = {v}", st.sampled_from("pq"), literals),
    st.builds(lambda v, p: f"{v} = {p}", literals, st.sampled_from("pq")),
    st.builds(lambda p, v: f"{p} IN ('{v}', 'x')", st.sampled_from("pq"), st.integers(0, 5)),
    st.builds(lambda p, n: f"{p} > {n}", st.sampled_from("pq"), st.integers(-5, 5)),
    st.builds(lambda p, n: f"{p} <= {n}.5", st.sampled_from("pq"), st.integers(-5, 5)),
    st.sampled_from(["p", "q", "TRUE", "FALSE", "NULL"]),
)
conditions = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.builds(lambda x, y: f"({x}) AND ({y})", inner, inner),
        st.builds(lambda x, y: f"({x}) OR ({y})", inner, inner),
        st.builds(lambda x: f"NOT ({x})", inner),
    ),
    max_leaves=6,
)


@given(conditions, messages)
def test_not_inverts_only_known_values(cond: str, msg: dict[str, str]) -> None:
    inner = outcome(cond, msg)
    negated = outcome(f"NOT ({cond})", msg)
    if inner is ERR or inner is None:
        assert negated == inner
    else:
        assert negated is (not inner)


@given(conditions, conditions, messages)
def test_and_or_are_kleene_left_to_right(x: str, y: str, msg: dict[str, str]) -> None:
    vx, vy = outcome(x, msg), outcome(y, msg)

    def kleene(stop: bool) -> object:
        if vx is ERR or vx is stop:
            return vx
        if vy is ERR or vy is stop:
            return vy
        return None if vx is None or vy is None else not stop

    assert outcome(f"({x}) AND ({y})", msg) == kleene(False)
    assert outcome(f"({x}) OR ({y})", msg) == kleene(True)


@given(st.integers(-10, 10), st.integers(0, 10), messages)
def test_between_is_ge_and_le(low: int, width: int, msg: dict[str, str]) -> None:
    high = low + width
    lo, hi = (f"{low}" if low >= 0 else f"-{-low}"), f"{high}"
    assert outcome(f"p BETWEEN {lo} AND {hi}", msg) == outcome(f"p >= {lo} AND p <= {hi}", msg)
    assert outcome(f"p NOT BETWEEN {lo} AND {hi}", msg) == outcome(f"p < {lo} OR p > {hi}", msg)


@given(st.lists(st.sampled_from(["x", "y", "3", "true", ""]), min_size=1, max_size=7), messages)
def test_in_is_or_of_equals_for_present_values(items: list[str], msg: dict[str, str]) -> None:
    listed = ", ".join(f"'{v}'" for v in items)
    ors = " OR ".join(f"p = '{v}'" for v in items)
    assert outcome(f"p IN ({listed})", msg) == outcome(ors, msg)
    expected_not = None if msg.get("p") is None else msg["p"] not in items
    assert outcome(f"p NOT IN ({listed})", msg) == expected_not


@given(st.text(max_size=40))
def test_any_text_compiles_or_is_refused_with_a_reason(text: str) -> None:
    try:
        selector = compile_selector(text)
    except Sql92Error as exc:
        assert exc.remark
    else:
        assert selector.matches({"a": "1"}) in (True, False)


def test_broker_filters_compile_once_per_subscription_version() -> None:
    from rmqk.model import ExpressionType
    from rmqk.plugins.broker.filtering import ConsumerFilters

    filters = ConsumerFilters()
    filters.register("T", "g", "a > 1", ExpressionType.SQL92, 10)
    first = filters.get("T", "g")
    assert first is not None and first.client_version == 10
    # Every heartbeat repeats the subscription: nothing is rebuilt.
    filters.register("T", "g", "a > 1", ExpressionType.SQL92, 10)
    assert filters.get("T", "g") is first
    # An older version never replaces a newer one.
    filters.register("T", "g", "a > 2", ExpressionType.SQL92, 9)
    assert filters.get("T", "g") is first
    # A newer version of the same text keeps the compiled selector.
    filters.register("T", "g", "a > 1", ExpressionType.SQL92, 11)
    again = filters.get("T", "g")
    assert again is not None and again.client_version == 11 and again.selector is first.selector
    # A new text compiles; one that does not compile drops the filter (pulls then report it).
    filters.register("T", "g", "a > 2", ExpressionType.SQL92, 12)
    changed = filters.get("T", "g")
    assert changed is not None and changed.expression == "a > 2"
    filters.register("T", "g", "a >", ExpressionType.SQL92, 13)
    assert filters.get("T", "g") is None
    # Tag subscriptions are not the filter manager's business.
    filters.register("T", "g2", "TagA", ExpressionType.TAG, 1)
    assert filters.get("T", "g2") is None

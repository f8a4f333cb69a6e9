"""One subscription-expression rule in every API (issue 27 item 7).

``rmqk check``, the push consumer, the lite pull consumer and the Spark source
all ask :func:`rmqk.model.names.check_expression`, so an expression one refuses the
others refuse with the same words; what passes is served by a real broker.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic, produce

from rmqk.app.cli import main
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.model.errors import ClientError
from rmqk.model.names import check_expression

pytestmark = pytest.mark.timeout(60)

# (expression, type, words the refusal must contain)
REFUSED = [
    ("a|b", "TAG", "single '|'"),
    ("a > 1", "TAG", "looks like SQL92 (it has '>')"),
    ("color = 'red'", "TAG", "looks like SQL92 (it has '=')"),
    ("a AND b", "TAG", "looks like SQL92 (it has 'AND')"),
    ("(a)", "TAG", "looks like SQL92"),
    ("||", "TAG", "names no tag"),
    ("* || a", "TAG", "'*' must stand alone"),
    ("  ", "SQL92", "SQL92 expression must not be empty"),
]
ACCEPTED = [("*", "TAG"), ("", "TAG"), (" a || b ", "TAG"), ("my tag", "TAG"), ("a > 1", "SQL92")]


@pytest.mark.parametrize(("expression", "etype", "words"), REFUSED)
def test_check_and_both_consumers_refuse_alike(
    expression: str, etype: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = check_expression(expression, etype)
    assert problem is not None and words in problem
    if etype == "TAG" and "SQL92" in problem:
        assert 'give the expression type "SQL92"' in problem
    config = tmp_path / "c.toml"
    config.write_text(
        '[consumers.orders]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:1"\nsink = "stdout"\n'
        f'subscription = {{ T = {{ expression = "{expression}", type = "{etype}" }} }}\n'
    )
    assert main(["check", str(config)]) != 0
    assert problem in capsys.readouterr().err
    for consumer in (
        AsyncPushConsumer("g-expr", namesrv_addr="127.0.0.1:1"),
        AsyncLitePullConsumer("g-expr", namesrv_addr="127.0.0.1:1"),
    ):
        with pytest.raises(ClientError) as refused:
            consumer.subscribe("T", expression, etype)
        assert problem in str(refused.value)


@pytest.mark.parametrize(("expression", "etype"), ACCEPTED)
def test_what_check_accepts_the_consumers_accept(expression: str, etype: str) -> None:
    assert check_expression(expression, etype) is None
    AsyncPushConsumer("g-expr", namesrv_addr="127.0.0.1:1").subscribe("T", expression, etype)
    AsyncLitePullConsumer("g-expr", namesrv_addr="127.0.0.1:1").subscribe("T", expression, etype)


async def test_running_consumers_refuse_and_a_valid_filter_is_served(broker: Any) -> None:
    """Over TCP: a running consumer refuses the same way, and ``a || b`` reads only those tags."""
    await create_topic(broker, "ExprT", 2)
    for tag in ("a", "b", "c"):
        await produce(broker.namesrv_addr, "ExprT", [tag.encode()] * 5, tags=tag)
    c = AsyncLitePullConsumer(
        "g-expr-run",
        namesrv_addr=broker.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    c.subscribe("ExprT", " a || b ")
    async with c:
        with pytest.raises(ClientError, match=re.escape("single '|'")):
            c.subscribe("ExprT", "a|b")
        got: list[bytes] = []
        for _ in range(100):
            got.extend(m.body for m in await c.poll(200))
            if len(got) >= 10:
                break
        assert await c.poll(300) == []
        assert sorted(got) == [b"a"] * 5 + [b"b"] * 5

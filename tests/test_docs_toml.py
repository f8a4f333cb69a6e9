"""The TOML a new user copies from README.md and docs/quickstart.md works as written.

Every fenced ``toml`` block is checked with ``rmqk check`` and then run with ``rmqk run``
from a fresh folder, pointed only at an embedded broker on a free loopback port; it must
consume exactly what its subscription selects into the output its sink names, and stop
cleanly on Ctrl-C. The quickstart's block is also the file it tells the user to run.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import module_broker, produce, rmqk, start_rmqk

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"
DEFAULT_NAMESRV = "127.0.0.1:9876"

broker = module_broker()

pytestmark = pytest.mark.timeout(300)


def toml_blocks(page: Path) -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", page.read_text(), re.M | re.S)


def test_each_page_has_its_consumer_toml() -> None:
    assert len(toml_blocks(README)) == 1
    assert len(toml_blocks(QUICKSTART)) == 1


def test_quickstart_block_is_the_shipped_example() -> None:
    # The page says "examples/jsonl.toml is the one to start from": it must be that file,
    # less its comments.
    block = toml_blocks(QUICKSTART)[0]
    shipped = "\n".join(
        line
        for line in (ROOT / "examples" / "jsonl.toml").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert [line for line in block.splitlines() if line] == shipped.splitlines()


def _place(block: str, namesrv: str, folder: Path) -> Path:
    assert DEFAULT_NAMESRV in block
    config = folder / "consumers.toml"
    config.write_text(block.replace(DEFAULT_NAMESRV, namesrv))
    check = rmqk("check", str(config), cwd=folder)
    assert check.returncode == 0, check.stderr
    return config


def _run_until(config: Path, folder: Path, done: Any, timeout: float = 120) -> str:
    proc = start_rmqk("run", str(config), cwd=folder)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not done():
            time.sleep(0.3)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode in (0, 130), err
    assert done(), err
    return err


def test_quickstart_toml_consumes_every_message_into_its_file(broker: Any, tmp_path: Path) -> None:
    config = _place(toml_blocks(QUICKSTART)[0], broker.namesrv_addr, tmp_path)
    sent = produce(broker.namesrv_addr, "Orders", "--count", "1000", "--tags", "TagA,TagB")
    assert sent.returncode == 0, sent.stderr
    out = tmp_path / "out" / "orders.jsonl"

    def lines() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    _run_until(config, tmp_path, lambda: len(lines()) >= 1000)
    records = [json.loads(line) for line in lines()]
    assert len(records) == 1000
    assert len({(r["queue_id"], r["queue_offset"]) for r in records}) == 1000

    # The page names a line's fields, in order, and their encodings.
    listed = re.search(
        r"A line is a JSON object with the fields (.*?), in that order",
        QUICKSTART.read_text(),
        re.S,
    )
    assert listed is not None, "the quickstart no longer says what a line holds"
    fields = re.findall(r"`(\w+)`", listed.group(1))
    for r in records:
        assert list(r) == fields
        assert isinstance(r["body"], str) and isinstance(r["born_timestamp"], int)
        # Milliseconds since the epoch: after 2001-09-09 (1e12 ms), which seconds are not.
        assert r["born_timestamp"] > 10**12 and r["store_timestamp"] > 10**12
    assert {r["tags"] for r in records} == {"TagA", "TagB"}


@pytest.mark.spark
def test_readme_toml_lands_tag_a_and_b_in_parquet(broker: Any, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    pq = pytest.importorskip("pyarrow.parquet")
    config = _place(toml_blocks(README)[0], broker.namesrv_addr, tmp_path)
    sent = produce(broker.namesrv_addr, "Orders", "--count", "300", "--tags", "TagA,TagB,TagC")
    assert sent.returncode == 0, sent.stderr
    out = tmp_path / "out" / "orders"

    def rows() -> int:
        # Read as any reader would, while the sink may be mid-flush.
        try:
            return int(pq.read_table(out).num_rows)
        except (OSError, ValueError):
            return 0

    # Only TagA and TagB are subscribed: two thirds of what this test sent, plus what
    # earlier tests of this module sent to the same topic (TagA and TagB only).
    _run_until(config, tmp_path, lambda: out.exists() and rows() >= 200, timeout=240)
    table = pq.read_table(out)
    tags = table.column("tags").to_pylist()
    assert set(tags) <= {"TagA", "TagB"}
    assert tags.count("TagA") == tags.count("TagB")

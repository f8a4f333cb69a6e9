"""`rmqk demo`'s terminal: the report's charts, the progress line, and Spark's output kept aside."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from rmqk.console.termchart import CLEAR_EOL
from rmqk.plugins.spark.demo_console import DemoConsole, jvm_output_to
from rmqk.plugins.spark.demo_report import DemoResult, QueueReport, format_report


class _Tty(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def _result() -> DemoResult:
    return DemoResult(
        produced=30,
        rows=30,
        distinct_ids=30,
        distinct_offsets=30,
        missing=0,
        unexpected=0,
        per_tag=(("cancelled", 2), ("created", 16), ("paid", 12)),
        queues=(QueueReport(0, 20, 0, 19, 20, 20), QueueReport(1, 10, 0, 9, 10, 10)),
        produce_seconds=1.0,
        consume_seconds=2.0,
        read_seconds=0.5,
        flushes=3,
        out_dir="/tmp/rmqk-demo-x/orders",
    )


def test_report_says_the_output_is_deleted_and_draws_bars() -> None:
    report = format_report(_result(), deleted=True)
    head = report.split("\nthroughput:")[0]
    assert head == (
        "\n"
        "Parquet output: /tmp/rmqk-demo-x/orders\n"
        "  (a temporary folder, deleted when the demo exits: rerun with --keep to keep it)\n"
        "\n"
        "rows per tag:\n"
        "  cancelled █████                                     2\n"
        "  created   ████████████████████████████████████████ 16\n"
        "  paid      ██████████████████████████████           12\n"
        "\n"
        "per queue:      rows                           offsets        broker max  committed  lag\n"
        "  queue 0         20 ████████████████████████  0..19                  20         20    0\n"
        "  queue 1         10 ████████████              0..9                   10         10    0\n"
    )
    assert "deleted" not in format_report(_result(), deleted=False)
    ascii_report = format_report(_result(), unicode=False)
    assert "  created   ######################################## 16" in ascii_report
    assert all(ord(c) < 128 for c in ascii_report)
    assert all(len(line) <= 100 for line in report.splitlines())


def test_progress_is_redrawn_in_place_and_ends_as_one_line() -> None:
    out, err = io.StringIO(), _Tty()
    console = DemoConsole(out, err)
    bar = console.progress("producing")
    bar(100_000, 200_000)
    bar(200_000, 200_000)
    first, second, rest = err.getvalue().split("\r")
    # A redraw that is shorter than the last one must not leave its tail ("msg/ss").
    assert first == "" and second.startswith("producing [") and second.endswith(CLEAR_EOL)
    assert rest.startswith(CLEAR_EOL + "producing [") and rest.endswith(" msg/s\n")
    assert rest.count("msg/s") == 1
    console.status("starting Spark (the first run takes ~10 s)... 3 s")
    console.say("Spark ready")
    assert err.getvalue().endswith("\r" + CLEAR_EOL) and out.getvalue() == "Spark ready\n"


def test_nothing_transient_is_written_off_a_terminal() -> None:
    out, err = io.StringIO(), io.StringIO()
    console = DemoConsole(out, err)
    console.progress("producing")(1, 2)
    console.status("starting Spark")
    console.say("done")
    assert err.getvalue() == "" and out.getvalue() == "done\n"


def test_a_process_started_inside_the_redirect_writes_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    script = (
        "import os, subprocess, sys\n"
        "from rmqk.plugins.spark.demo_console import jvm_output_to\n"
        f"with jvm_output_to({str(log)!r}):\n"
        "    child = subprocess.Popen([sys.executable, '-c',\n"
        '        \'import sys, time; time.sleep(0.3); print("jvm out", flush=True); '
        'print("jvm err", file=sys.stderr)\'])\n'
        "print('demo line')\n"
        "child.wait()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # The child wrote after the redirect ended, and still into the log.
    assert done.stdout == "demo line\n" and done.stderr == ""
    assert log.read_text().splitlines() == ["jvm out", "jvm err"]
    assert jvm_output_to is not None

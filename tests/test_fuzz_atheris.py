"""Coverage-guided fuzzing with atheris, when it is installed (it is not a dependency).

The same oracles as the hypothesis tests: the frame decoder may only raise
FrameError, the message decoder FrameError, the route parser BodyFormatError,
the config loader and the ACL file loader ConfigError. Each target runs in a
child process (atheris ends its process when done), for a bounded number of
inputs and seconds. Run one longer by hand::

    python tests/test_fuzz_atheris.py route -runs=1000000 -max_total_time=600
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

TARGETS = ("frame", "message", "route", "config", "acl")


def _frame(data: bytes) -> None:
    from rmqk.model.errors import FrameError
    from rmqk.wire.frame import FrameDecoder, decode_frame

    with contextlib.suppress(FrameError):
        decode_frame(data)
    decoder = FrameDecoder(max_frame_size=4096)
    with contextlib.suppress(FrameError):
        decoder.feed(data)


def _message(data: bytes) -> None:
    from rmqk.model.errors import FrameError
    from rmqk.wire.message_codec import decode_batch, decode_messages

    for decode in (decode_messages, decode_batch):
        try:
            for m in decode(data):
                getattr(m, "properties", None)
        except FrameError:
            pass


def _route(data: bytes) -> None:
    from rmqk.plugins.remoting.namesrv import decode_topic_route
    from rmqk.wire.bodies import BodyFormatError

    with contextlib.suppress(BodyFormatError):
        decode_topic_route(data)


def _file_loader(suffix: str, load: Callable[[Path], object]) -> Callable[[bytes], None]:
    from rmqk.model.errors import ConfigError

    path = Path(tempfile.mkdtemp(prefix="rmqk-atheris-")) / f"fuzz{suffix}"

    def run(data: bytes) -> None:
        path.write_bytes(data)
        with contextlib.suppress(ConfigError):
            load(path)

    return run


def _target(name: str) -> Callable[[bytes], None]:
    if name == "config":
        from rmqk.app.config import load_config

        return _file_loader(".toml", load_config)
    if name == "acl":
        from rmqk.plugins.broker.acl import load_acl_config

        return _file_loader(".toml", load_acl_config)
    return {"frame": _frame, "message": _message, "route": _route}[name]


def main(argv: list[str]) -> None:
    import atheris

    name = argv[1]
    target = _target(name)
    target(b"")  # import everything the target uses, so that it gets instrumented
    atheris.instrument_all()
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
@pytest.mark.parametrize("name", TARGETS)
def test_atheris(name: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, __file__, name, "-runs=20000", "-max_total_time=20", "-timeout=5",
         f"-artifact_prefix={tmp_path}{os.sep}"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]


if __name__ == "__main__":
    main(sys.argv)

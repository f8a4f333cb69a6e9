"""The optional compiled record decoder, header codec, process-queue loops and Spark columns.

Everything else is in pyproject.toml.

``optional=True``: where no C compiler (or no Python headers) is found, the build
warns and the wheel holds the pure-Python decoder alone, which is also what
``RMQK_NO_EXTENSIONS=1`` selects at run time.
"""

from setuptools import Extension, setup

# Both extensions that touch MessageExt's slots include it: listed in their
# ``depends`` so that editing it rebuilds them and the sdist carries it.
SLOT_OFFSETS_H = "kernel/wire/_slot_offsets.h"

setup(
    ext_modules=[
        Extension(
            "rmqk.wire._speedups",
            sources=["kernel/wire/_speedups.c"],
            depends=[SLOT_OFFSETS_H],
            optional=True,
        ),
        Extension(
            "rmqk.wire._headers",
            sources=["kernel/wire/_headers.c"],
            optional=True,
        ),
        Extension(
            "rmqk.engine._pq_speedups",
            sources=["kernel/engine/_pq_speedups.c"],
            optional=True,
        ),
        Extension(
            "rmqk.plugins.spark._columns",
            sources=["plugins/spark/_columns.c", "plugins/spark/_columns_props.c"],
            depends=["plugins/spark/_columns.h", SLOT_OFFSETS_H],
            include_dirs=["kernel/wire"],
            optional=True,
        ),
    ]
)

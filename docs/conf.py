"""Sphinx configuration: the docs are Markdown, built with MyST, warnings as errors in tox.

The reference pages (config, hooks, CLI) are generated from the code into the
Markdown by ``python docs/_ext/rmqk_reference.py --write`` and committed; the build
renders them as they are (``tests/test_docs.py`` fails while one is stale). The
``rmqk_reference`` extension in ``_ext/`` fills in the index's ``<!-- other pages -->``.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "rmqk"
author = "rmqk developers"
extensions = ["myst_parser", "rmqk_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.xref_missing"]
html_theme = "alabaster"
html_title = "rmqk"

"""Sphinx configuration: the docs are Markdown, built with MyST, warnings as errors in tox."""

project = "rmqk"
author = "rmqk developers"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]
html_theme = "alabaster"

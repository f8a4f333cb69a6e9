"""rmqk's default plugins.

Each subpackage is one plugin family, registered through an entry point of group
``rmqk`` in pyproject.toml exactly as a third-party plugin would be. Nothing in
the kernel imports from here.
"""

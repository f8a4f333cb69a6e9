"""The application: the ``rmqk`` command line, the runtime that composes consumers from
TOML, the supervisor and its worker processes, and what is printed to a terminal.

Built on :mod:`rmqk.engine`; nothing in the engine or the plugin contracts imports it.
"""

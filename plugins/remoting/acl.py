"""The ``acl`` plugin: signs every request as Apache's AclClientRPCHook does.

A broker with ACL enabled checks three header fields: ``AccessKey``,
``Signature`` and, when the credentials carry one, ``SecurityToken``. The
signature is ``base64(HmacSHA1(secret_key, content))`` where ``content`` is the
values of all header fields (``AccessKey`` and ``SecurityToken`` included,
``Signature`` left out) concatenated in the order of their names, as UTF-8,
followed by the body bytes.

Credentials, first found wins:

1. the ``[acl]`` table of the config file (``access_key``, ``secret_key``,
   optional ``security_token``), checked by ``rmqk_check_config`` and delivered by
   the historic ``rmqk_configure`` hook,
   or :func:`configure` called by a program;
2. the environment variables ``RMQK_ACCESS_KEY`` and ``RMQK_SECRET_KEY`` (and
   ``RMQK_SECURITY_TOKEN``).

These are the process defaults. A client given its own credentials (the client
options ``access_key`` and ``secret_key``, :class:`rmqk.spi.client_options.ClientOptions`)
is signed with those instead: its transport signs each request after this hook
(:func:`sign`), so two clients of one process can use two accounts.

Without credentials nothing is signed. The secret key is never logged or shown
in a repr.

The environment is read when this module is loaded, whenever a ``tcp`` transport is
created (each client instance creates one as it is built, before its first
request) and at each :func:`configure`; not per request, where two unset
variables cost about 1 us a pull. So a variable set before the consumer or
producer is created signs its requests; a change made while a client runs takes
effect when the next transport is created (or at :func:`load_environment`), for
every client of the process. While nothing signs, the transport skips the hook
call altogether (:func:`rmqk.hookcalls.idle_when`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.spi.hookspecs import hookimpl
from rmqk.spi.registry import idle_when
from rmqk.spi.transport import Credentials
from rmqk.wire.protocol import RemotingCommand
from rmqk.wire.signature import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    calculate_signature,
    sign,
    signature_content,
)

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "Credentials",
    "calculate_signature",
    "configure",
    "current_credentials",
    "load_environment",
    "rmqk_before_request",
    "rmqk_check_config",
    "rmqk_configure",
    "sign",
    "signature_content",
    "signing_credentials",
]

ENV_ACCESS_KEY = "RMQK_ACCESS_KEY"
ENV_SECRET_KEY = "RMQK_SECRET_KEY"
ENV_SECURITY_TOKEN = "RMQK_SECURITY_TOKEN"


_lock = threading.Lock()
_configured: Credentials | None = None
# What requests are signed with: _configured, else the environment when last read.
_signing: Credentials | None = None


def _from_environment() -> Credentials | None:
    access_key = os.environ.get(ENV_ACCESS_KEY, "")
    secret_key = os.environ.get(ENV_SECRET_KEY, "")
    if not access_key or not secret_key:
        return None
    return Credentials(access_key, secret_key, os.environ.get(ENV_SECURITY_TOKEN) or None)


def configure(credentials: Credentials | None) -> None:
    """Set (or with None, clear) the credentials that take precedence over the environment."""
    global _configured, _signing
    with _lock:
        _configured = credentials
        _signing = credentials if credentials is not None else _from_environment()


def load_environment() -> None:
    """Read the environment variables again: without configured credentials, requests
    are signed with what they hold from now on."""
    global _signing
    with _lock:
        _signing = _configured if _configured is not None else _from_environment()


def current_credentials() -> Credentials | None:
    """The configured credentials, else those the environment holds now, or None."""
    configured = _configured
    if configured is not None:
        return configured
    return _from_environment()


def signing_credentials() -> Credentials | None:
    """The credentials requests are signed with now, or None (no signing)."""
    return _signing


def _idle() -> bool:
    return _signing is None


def _credentials_from_table(table: Any) -> Credentials:
    where = "<config>"
    if not isinstance(table, Mapping):
        raise ConfigError([ConfigProblem(where, "acl", None, "must be a table")])
    problems = []
    values: dict[str, str | None] = {}
    for key, required in (("access_key", True), ("secret_key", True), ("security_token", False)):
        value = table.get(key)
        if value is None and not required:
            values[key] = None
        elif not isinstance(value, str) or not value:
            problems.append(ConfigProblem(where, "acl", key, "must be a non-empty string"))
        else:
            values[key] = value
    for key in table:
        if key not in ("access_key", "secret_key", "security_token"):
            problems.append(
                ConfigProblem(
                    where,
                    "acl",
                    str(key),
                    "unknown key; known: access_key, secret_key, security_token",
                )
            )
    if problems:
        raise ConfigError(problems)
    return Credentials(
        str(values["access_key"]), str(values["secret_key"]), values["security_token"]
    )


@hookimpl
def rmqk_check_config(config: Mapping[str, Any]) -> None:
    """Check the ``[acl]`` table, when the config has one, without using it."""
    table = config.get("acl")
    if table is not None:
        _credentials_from_table(table)


@hookimpl
def rmqk_configure(config: Mapping[str, Any]) -> None:
    """Read the ``[acl]`` table, when the config has one."""
    table = config.get("acl")
    if table is not None:
        configure(_credentials_from_table(table))


@hookimpl
@idle_when(_idle)
def rmqk_before_request(address: str, request: RemotingCommand) -> None:
    """Sign ``request`` when credentials are configured (AclClientRPCHook.doBeforeRequest)."""
    credentials = _signing
    if credentials is not None:
        sign(request, credentials)


load_environment()

"""TLS for remoting connections (Apache's ``tls.client.*`` settings).

A broker started with ``tls.server.mode=permissive`` or ``enforcing`` accepts TLS
on its normal remoting port, so the client only wraps the same socket.
"""

from __future__ import annotations

import ssl

from rmqk.model.errors import ConfigError
from rmqk.spi.transport import TlsConfig

__all__ = ["client_ssl_context", "server_hostname"]


def client_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """The SSL context for ``tls``, or None when TLS is off.

    With ``verify`` the peer's certificate must chain to ``ca_file`` (or the system
    store when no CA file is given) and match the host; without it any certificate
    is accepted, like Apache's ``tls.client.authServer=false``. ``cert_file`` and
    ``key_file`` give a client certificate for brokers that require one.
    """
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if tls.verify:
        if tls.ca_file:
            try:
                ctx.load_verify_locations(cafile=tls.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"tls.ca_file {tls.ca_file!r} cannot be loaded: {exc}") from exc
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert_file:
        try:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"tls.cert_file {tls.cert_file!r} / tls.key_file {tls.key_file!r} "
                f"cannot be loaded: {exc}"
            ) from exc
    elif tls.key_file:
        raise ConfigError("tls.key_file is set but tls.cert_file is not")
    return ctx


def server_hostname(tls: TlsConfig, host: str) -> str:
    """The name the broker's certificate is checked against ("" when nothing is checked)."""
    if tls.server_hostname:
        return tls.server_hostname
    if not tls.verify:
        return ""
    return host.strip("[]")

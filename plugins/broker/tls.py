"""TLS on a server port: Apache's ``tls.server.*`` settings and the server's SSL context."""

from __future__ import annotations

import ssl

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem

__all__ = ["CLIENT_AUTH", "TLS_HANDSHAKE", "TLS_MODES", "ServerTlsConfig"]

TLS_MODES = ("enforcing", "permissive")
CLIENT_AUTH = ("none", "optional", "require")
# The first byte of a TLS connection: a handshake record (what Apache's permissive mode sniffs).
TLS_HANDSHAKE = 0x16


@attrs.frozen(repr=False)
class ServerTlsConfig:
    """TLS on a server port (Apache's ``tls.server.*`` settings).

    ``mode`` ``enforcing`` accepts only TLS; ``permissive`` (Apache's default)
    accepts TLS and plain connections on the same port, telling them apart by
    their first byte. ``client_auth`` ``require`` (or ``optional``) asks clients
    for a certificate signed by ``ca_file``
    (``tls.server.need.client.auth``).
    """

    cert_file: str
    key_file: str
    ca_file: str | None = None
    mode: str = "enforcing"
    client_auth: str = "none"

    def __repr__(self) -> str:
        # The key file's path is not secret, but its content is: only paths are shown.
        return (
            f"ServerTlsConfig(cert_file={self.cert_file!r}, key_file={self.key_file!r}, "
            f"ca_file={self.ca_file!r}, mode={self.mode!r}, client_auth={self.client_auth!r})"
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The server context; ConfigError names the setting that cannot be used."""

        def fail(key: str, message: str) -> ConfigError:
            return ConfigError([ConfigProblem("<broker options>", "tls", key, message)])

        if self.mode not in TLS_MODES:
            raise fail("mode", f"must be one of {', '.join(TLS_MODES)}, got {self.mode!r}")
        if self.client_auth not in CLIENT_AUTH:
            raise fail(
                "client_auth", f"must be one of {', '.join(CLIENT_AUTH)}, got {self.client_auth!r}"
            )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise fail(
                "cert_file",
                f"{self.cert_file!r} with key_file {self.key_file!r} cannot be loaded: "
                f"{_reason(exc)}",
            ) from None
        if self.client_auth != "none":
            if not self.ca_file:
                raise fail("ca_file", f"client_auth={self.client_auth!r} needs a ca_file")
            try:
                ctx.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                reason = _reason(exc)
                raise fail("ca_file", f"{self.ca_file!r} cannot be loaded: {reason}") from None
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth == "require" else ssl.CERT_OPTIONAL
            )
        return ctx


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)

"""TLS on the remoting port, with a throwaway CA made by the openssl command line."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from test_transport_support import ScriptedServer, config

from rmqk.model.errors import ConfigError, RemotingConnectError
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi.transport import TlsConfig
from rmqk.wire.protocol import RemotingCommand, ResponseCode

pytestmark = pytest.mark.timeout(60)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, and server.crt/server.key for IP 127.0.0.1 signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command (the cryptography package is not installed)")
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=rmqk test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        cwd=d,
    )  # fmt: skip
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf",
        cwd=d,
    )  # fmt: skip
    return d


def server_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server.crt", pki / "server.key")
    return ctx


async def test_tls_round_trip_verified(pki: Path) -> None:
    async with ScriptedServer(ssl_context=server_context(pki)) as server:
        tls = TlsConfig(enabled=True, ca_file=str(pki / "ca.crt"))
        transport = TcpTransport(config(server.addr, tls=tls))
        try:
            for _ in range(3):
                response = await transport.invoke(server.addr, RemotingCommand.request(30), 5000)
                assert response.code == ResponseCode.SUCCESS
            assert len(server.connections) == 1
        finally:
            await transport.close()


async def test_tls_without_verification(pki: Path) -> None:
    async with ScriptedServer(ssl_context=server_context(pki)) as server:
        transport = TcpTransport(config(server.addr, tls=TlsConfig(enabled=True, verify=False)))
        try:
            response = await transport.invoke(server.addr, RemotingCommand.request(30), 5000)
            assert response.code == ResponseCode.SUCCESS
        finally:
            await transport.close()


async def test_tls_unknown_ca_is_refused(pki: Path) -> None:
    async with ScriptedServer(ssl_context=server_context(pki)) as server:
        transport = TcpTransport(config(server.addr, tls=TlsConfig(enabled=True)))
        try:
            with pytest.raises(RemotingConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await transport.invoke(server.addr, RemotingCommand.request(30), 5000)
        finally:
            await transport.close()


def test_tls_bad_files_are_config_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.pem")
    with pytest.raises(ConfigError, match=r"tls\.ca_file"):
        TcpTransport(config("h:1", tls=TlsConfig(enabled=True, ca_file=missing)))
    with pytest.raises(ConfigError, match=r"tls\.key_file is set"):
        TcpTransport(config("h:1", tls=TlsConfig(enabled=True, key_file=missing)))

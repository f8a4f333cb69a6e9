"""The acl plugin (AclClientRPCHook) and the tcp transport's registration."""

from __future__ import annotations

import base64
import hashlib
import hmac

import attrs
import pluggy
import pytest
from test_transport_support import PeerConnection, ScriptedServer, config

import rmqk.plugins.remoting as remoting_plugin
from rmqk.model.errors import ConfigError
from rmqk.pluginmanager import Registries
from rmqk.plugins.remoting import acl
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi import hookspecs
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("no_acl_credentials")]


def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(remoting_plugin, name="remoting")
    pm.register(acl, name="acl")
    return pm


def offset_query() -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g1", "topic": "t1", "queueId": 0}
    )


def test_signature_golden_value() -> None:
    request = offset_query()
    acl.sign(request, acl.Credentials("RocketMQ", "12345678"))
    # Values in key order (AccessKey, consumerGroup, queueId, topic), then the (empty) body;
    # the literal is `openssl dgst -sha1 -hmac 12345678 -binary | base64` of that text.
    content = b"RocketMQ" + b"g1" + b"0" + b"t1"
    expected = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert expected == "H1D1BnYodhJr1dCyCSw08o9yyRQ="
    assert request.ext_fields["Signature"] == expected
    assert request.ext_fields["AccessKey"] == "RocketMQ"
    assert "SecurityToken" not in request.ext_fields


def test_signature_with_security_token_and_body() -> None:
    request = offset_query()
    request.body = b"hello"
    acl.sign(request, acl.Credentials("RocketMQ", "12345678", "TOKEN"))
    assert request.ext_fields["SecurityToken"] == "TOKEN"
    assert request.ext_fields["Signature"] == "eHZe+DhvFASj7qfEOMWpstBYOGE="
    # Signing again (a retry) gives the same signature: the old one is not signed over.
    acl.sign(request, acl.Credentials("RocketMQ", "12345678", "TOKEN"))
    assert request.ext_fields["Signature"] == "eHZe+DhvFASj7qfEOMWpstBYOGE="


def verify(cmd: RemotingCommand, secret: bytes) -> bool:
    fields = {k: v for k, v in cmd.ext_fields.items() if k != "Signature"}
    content = "".join(fields[k] for k in sorted(fields)).encode() + cmd.body
    digest = base64.b64encode(hmac.new(secret, content, hashlib.sha1).digest()).decode()
    return cmd.ext_fields.get("Signature") == digest


async def test_hook_rmqk_before_request() -> None:
    """The acl plugin signs every request the transport sends, only with credentials."""
    pm = plugin_manager()

    def broker(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        ok = verify(cmd, b"s3cret")
        return RemotingCommand.response_to(
            cmd, ResponseCode.SUCCESS if ok else ResponseCode.NO_PERMISSION, fields={"offset": 1}
        )

    async with ScriptedServer(broker) as server:
        transport = TcpTransport(config(server.addr), pm.hook)
        try:
            unsigned = await transport.invoke(server.addr, offset_query(), 2000)
            assert unsigned.code == ResponseCode.NO_PERMISSION
            assert "AccessKey" not in server.requests[0].ext_fields
            acl.configure(acl.Credentials("ak", "s3cret"))
            request = offset_query()
            request.body = b"payload"
            signed = await transport.invoke(server.addr, request, 2000)
            assert signed.code == ResponseCode.SUCCESS
            assert server.requests[1].ext_fields["AccessKey"] == "ak"
        finally:
            await transport.close()


def test_hook_rmqk_configure() -> None:
    """The [acl] table of the config file gives the credentials."""
    pm = plugin_manager()
    pm.hook.rmqk_configure.call_historic(
        kwargs={"config": {"acl": {"access_key": "ak", "secret_key": "sk", "security_token": "t"}}}
    )
    assert acl.current_credentials() == acl.Credentials("ak", "sk", "t")
    with pytest.raises(ConfigError) as err:
        acl.rmqk_configure({"acl": {"access_key": "ak", "secrt_key": "sk"}})
    text = str(err.value)
    assert "[acl] secret_key: must be a non-empty string" in text
    assert "[acl] secrt_key: unknown key" in text
    assert "sk" not in text.replace("secrt_key", "").replace("secret_key", "")


def test_environment_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    assert acl.current_credentials() is None
    monkeypatch.setenv("RMQK_ACCESS_KEY", "env-ak")
    assert acl.current_credentials() is None  # both keys are needed
    monkeypatch.setenv("RMQK_SECRET_KEY", "env-sk")
    assert acl.current_credentials() == acl.Credentials("env-ak", "env-sk")
    acl.configure(acl.Credentials("file-ak", "file-sk"))
    assert acl.current_credentials() == acl.Credentials("file-ak", "file-sk")


async def test_environment_is_read_when_a_transport_is_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Variables set before the client's transport exists sign its requests; a change
    takes effect at the next transport (the variables are not read per request)."""
    pm = plugin_manager()

    def broker(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        ok = verify(cmd, b"env-s3cret")
        return RemotingCommand.response_to(
            cmd, ResponseCode.SUCCESS if ok else ResponseCode.NO_PERMISSION, fields={"offset": 1}
        )

    async with ScriptedServer(broker) as server:
        monkeypatch.setenv("RMQK_ACCESS_KEY", "env-ak")
        monkeypatch.setenv("RMQK_SECRET_KEY", "env-s3cret")
        first = TcpTransport(config(server.addr), pm.hook)
        try:
            assert (await first.invoke(server.addr, offset_query(), 2000)).code == (
                ResponseCode.SUCCESS
            )
            assert server.requests[0].ext_fields["AccessKey"] == "env-ak"
            monkeypatch.delenv("RMQK_SECRET_KEY")
            # Read when the transport was created, so still signed.
            assert (await first.invoke(server.addr, offset_query(), 2000)).code == (
                ResponseCode.SUCCESS
            )
            second = TcpTransport(config(server.addr), pm.hook)
            try:
                unsigned = await second.invoke(server.addr, offset_query(), 2000)
                assert unsigned.code == ResponseCode.NO_PERMISSION
                assert "AccessKey" not in server.requests[2].ext_fields
            finally:
                await second.close()
        finally:
            await first.close()
    assert acl.signing_credentials() is None
    monkeypatch.setenv("RMQK_SECRET_KEY", "env-s3cret")
    acl.load_environment()
    assert acl.signing_credentials() == acl.Credentials("env-ak", "env-s3cret")
    acl.configure(acl.Credentials("file-ak", "file-sk"))
    assert acl.signing_credentials() == acl.Credentials("file-ak", "file-sk")
    acl.configure(None)
    assert acl.signing_credentials() == acl.Credentials("env-ak", "env-s3cret")


async def test_the_transport_skips_the_hook_while_nothing_signs() -> None:
    """No pluggy call per request while the acl plugin has no credentials; one per
    request once it has, and any plugin not marked idle is always called."""
    pm = plugin_manager()
    called: list[str] = []

    def before(hook_name: str, hook_impls: object, kwargs: object) -> None:
        called.append(hook_name)

    def after(outcome: object, hook_name: str, hook_impls: object, kwargs: object) -> None:
        pass

    pm.add_hookcall_monitoring(before, after)

    def broker(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, fields={"offset": 1})

    async with ScriptedServer(broker) as server:
        transport = TcpTransport(config(server.addr), pm.hook)
        try:
            await transport.invoke(server.addr, offset_query(), 2000)
            assert called == []
            acl.configure(acl.Credentials("ak", "s3cret"))
            await transport.invoke(server.addr, offset_query(), 2000)
            assert called == ["rmqk_before_request"]
            assert "Signature" in server.requests[1].ext_fields
            acl.configure(None)
            seen: list[str] = []

            class Watcher:
                @hookspecs.hookimpl
                def rmqk_before_request(self, address: str, request: RemotingCommand) -> None:
                    seen.append(address)

            pm.register(Watcher(), name="watcher")
            await transport.invoke(server.addr, offset_query(), 2000)
            assert seen == [server.addr]
            assert "AccessKey" not in server.requests[2].ext_fields
            assert called == ["rmqk_before_request"] * 2
        finally:
            await transport.close()


def test_secret_is_not_shown() -> None:
    creds = acl.Credentials("key-id", "very-secret", "tok3n")
    shown = repr(creds) + str(creds)
    assert "very-secret" not in shown
    assert "tok3n" not in shown
    assert "key-id" in shown


def test_no_credentials_no_fields() -> None:
    request = offset_query()
    acl.rmqk_before_request("127.0.0.1:1", request)
    assert set(request.ext_fields) == {"consumerGroup", "topic", "queueId"}


def test_hook_rmqk_register_transports() -> None:
    """The remoting plugin registers the tcp transport, built as (config, options)."""
    pm = plugin_manager()
    registries = Registries(pm)
    assert "tcp" in registries.transports
    transport = registries.transports.create(
        "tcp", attrs.evolve(config("127.0.0.1:9876"), hook=pm.hook)
    )
    assert isinstance(transport, TcpTransport)
    assert transport.namesrv_addrs == ("127.0.0.1:9876",)

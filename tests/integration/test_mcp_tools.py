"""Tools of an MCP server (stdio, started by the service) through NATS: namespaced names,
the server's schemas checked before a call, its errors as tool results, modes (issue 16)."""

from __future__ import annotations

import asyncio
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from core.errors import Unavailable
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.tool_helpers import CHAT, tool_results, turn_ended

SERVER = Path(__file__).with_name("mcp_test_server.py")


def mcp_servers(**extra: object) -> str:
    return orjson.dumps([{"name": "calc", "command": sys.executable, "args": [str(SERVER)], "timeout_s": 20, **extra}]).decode()


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"mcp_servers_json": mcp_servers()})


async def _run(nc: Client, subjects: Subjects, script: str) -> tuple[Collector, Collector]:
    sid = f"mcp-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: turn_ended(events), what="turn.ended")
    await wait_for(lambda: replies.messages, what="the reply")
    return replies, checkpoints


async def test_an_mcp_servers_tools_are_registered_under_its_name_with_their_schemas(service: TurnstileService) -> None:
    assert service.engines is not None
    tools = service.engines.tools
    add = tools.get("calc__add")
    assert add is not None and tools.get("calc__fail") is not None and tools.get("add") is None
    assert add.parameters["required"] == ["a", "b"] and add.description == "Add two integers."
    # idempotentHint from the server; a tool without hints is never re-run after a crash.
    assert add.idempotent is True and tools.get("calc__append_and_wait").idempotent is False  # type: ignore[union-attr]
    assert add.timeout_s == 20


async def test_an_mcp_tool_is_called_through_a_turn_and_its_result_is_checkpointed(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    replies, checkpoints = await _run(nc, subjects, '/tool calc__add {"a": 2, "b": 40}\n/say done')
    [result] = tool_results(checkpoints)
    assert result == {**result, "name": "calc__add", "ok": True, "content": "42", "interrupted": False}
    assert [r["text"] for r in replies.json()] == ["done"]


async def test_bad_arguments_are_refused_before_the_server_and_server_errors_are_tool_errors(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    _, checkpoints = await _run(nc, subjects, '/tool calc__add {"a": "two", "b": 1}\n/tool calc__fail {"reason": "no"}\n/say ok')
    refused, failed = tool_results(checkpoints)
    assert refused["ok"] is False and refused["content"] == "error (invalid): arguments.a: 'two' is not of type 'integer'"
    assert failed["ok"] is False and failed["content"] == "Error executing tool fail"


@pytest.mark.parametrize("modes", [["free_time"]])
async def test_an_mcp_server_limited_to_other_modes_offers_nothing_to_a_conversation(
    settings: Settings, nc: Client, subjects: Subjects, modes: list[str]
) -> None:
    service = TurnstileService(settings.model_copy(update={"mcp_servers_json": mcp_servers(modes=modes)}))
    await service.start()
    try:
        assert service.engines is not None
        assert not [s for s in service.engines.tools.specs_for("conversation", has_work=False) if s.name.startswith("calc__")]
        _, checkpoints = await _run(nc, subjects, '/tool calc__add {"a": 1, "b": 1}\n/say ok')
        [result] = tool_results(checkpoints)
        assert result["content"] == "error (forbidden): tool 'calc__add' is not available in conversation mode"
    finally:
        await service.stop()


async def test_a_server_that_cannot_start_stops_the_service_start_with_a_clear_error(settings: Settings) -> None:
    broken = orjson.dumps([{"name": "gone", "command": sys.executable, "args": ["-c", "raise SystemExit(3)"], "connect_timeout_s": 20}]).decode()
    service = TurnstileService(settings.model_copy(update={"mcp_servers_json": broken}))
    try:
        with pytest.raises(Unavailable, match="MCP server 'gone' could not be started"):
            await service.start()
    finally:
        await service.stop()


@pytest.fixture
async def http_mcp_server(tmp_path: Path) -> AsyncIterator[str]:
    """The same test server over streamable HTTP on a free loopback port; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (tmp_path / "mcp-http.log").open("ab") as log:
        proc = await asyncio.create_subprocess_exec(sys.executable, str(SERVER), "--http", str(port), stdout=log, stderr=log)

    async def listening() -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert proc.returncode is None, (tmp_path / "mcp-http.log").read_text()
            return False
        writer.close()
        await writer.wait_closed()
        return True

    try:
        await wait_for(listening, timeout_s=30, what="the MCP HTTP server")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


async def test_a_streamable_http_mcp_server_is_reached_by_url(
    settings: Settings, nc: Client, subjects: Subjects, http_mcp_server: str
) -> None:
    config = orjson.dumps([{"name": "web", "url": http_mcp_server, "headers": {"X-Team": "t1"}}]).decode()
    service = TurnstileService(settings.model_copy(update={"mcp_servers_json": config}))
    await service.start()
    try:
        _, checkpoints = await _run(nc, subjects, '/tool web__add {"a": 20, "b": 22}\n/say ok')
        [result] = tool_results(checkpoints)
        assert result["name"] == "web__add" and result["ok"] is True and result["content"] == "42"
    finally:
        await service.stop()


@pytest.mark.rule("KS-8")
async def test_interrupting_a_running_mcp_call_repairs_it_and_the_server_stays_usable(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    sid = f"mcp-intr-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "call.log"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    script = f"/tool calc__append_and_wait {orjson.dumps({'log': str(log)}).decode()}\n/say never"
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: log.exists(), what="the MCP call to be running")
    stopped = await api(nc, subjects, "session", "interrupt", {"session_id": sid})
    assert stopped["ok"] and stopped["result"]["stopped_running"], stopped
    await wait_for(lambda: turn_ended(events), what="turn.ended")
    [result] = tool_results(checkpoints)
    assert result["interrupted"] is True and result["content"] == "interrupted: stopped by the user"
    assert not replies.messages
    log.with_name(log.name + ".release").touch()  # let the server's abandoned handler finish
    await publish_inbound(nc, subjects, inbound(sid, '/tool calc__add {"a": 1, "b": 2}\n/say again', chat=CHAT))
    await wait_for(lambda: replies.messages, what="the next reply")
    assert tool_results(checkpoints)[-1]["content"] == "3" and replies.json()[0]["text"] == "again"

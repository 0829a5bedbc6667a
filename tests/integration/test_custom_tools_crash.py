"""SIGKILL while a custom or MCP tool runs: after the restart a non-idempotent tool is not run
again (a durable interrupted result instead), an idempotent one is (KS-10's resume rule, issue 16)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import transitions
from tests.integration.service_process import ServiceProcess
from tests.integration.tool_helpers import CHAT, tool_results, turn_ended

MCP_SERVER = Path(__file__).with_name("mcp_test_server.py")
NOT_RERUN = "interrupted: the worker stopped while this tool ran; it was not re-run and its effect is unknown"


@pytest.fixture
async def worker(settings: Settings, tmp_path: Path) -> AsyncIterator[ServiceProcess]:
    env = {
        "TURNSTILE_TOOL_MODULES": '["tests.integration.plugin_tools"]',
        "TURNSTILE_MCP_SERVERS_JSON": orjson.dumps([{"name": "calc", "command": sys.executable, "args": [str(MCP_SERVER)]}]).decode(),
    }
    proc = ServiceProcess(settings, tmp_path / "service.log", extra_env=env)
    try:
        yield proc
    finally:
        await proc.stop()


@pytest.mark.rule("KS-10")
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("tool", "runs", "result"),
    [
        ("hold_once", 1, NOT_RERUN),
        ("hold_again", 2, "done after 2 run(s)"),
        ("calc__append_and_wait", 1, NOT_RERUN),
    ],
)
async def test_a_tool_cut_off_by_a_kill_is_rerun_after_restart_only_when_idempotent(
    worker: ServiceProcess, nc: Client, subjects: Subjects, tmp_path: Path, tool: str, runs: int, result: str
) -> None:
    sid = f"tool-crash-{uuid.uuid4().hex[:6]}"
    log = tmp_path / f"{tool}.log"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await worker.start()
    await worker.wait_ready(nc)
    script = f"/tool {tool} {orjson.dumps({'log': str(log)}).decode()}\n/say done"
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: log.exists() and log.read_text().count("run") == 1, timeout_s=30, what="the tool to run")
    await worker.kill()
    assert transitions(checkpoints)[-1] == "tool_call"  # the dispatch is journaled, its result is not
    log.with_name(log.name + ".release").touch()

    await worker.start()
    await worker.wait_ready(nc)
    await wait_for(lambda: turn_ended(events), timeout_s=60, what="the resumed turn to end")
    await wait_for(lambda: replies.messages, what="the reply")
    assert log.read_text().count("run") == runs
    [only] = tool_results(checkpoints)
    assert only["content"] == result and only["interrupted"] is (runs == 1)
    assert [r["text"] for r in replies.json()] == ["done"]

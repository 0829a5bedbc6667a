"""KS-19 across a crash: a turn that wrote a file keeps its write lease when the service restarts."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import results_by_call
from tests.integration.service_process import ServiceProcess


async def project_session(nc: Client, subjects: Subjects, root: Path, workspace: str) -> str:
    body = {"fields": {"id": f"lease-{uuid.uuid4().hex[:6]}"},
            "creation": {"created_from": "cli", "workspace": workspace, "work": {"root": str(root)}}}
    reply = await api(nc, subjects, "session", "create", body)
    assert reply["ok"], reply
    return str(reply["result"]["id"])


def write(path: str, content: str) -> str:
    return f"/tool write_file {orjson.dumps({'path': path, 'content': content}).decode()}"


def tool_results(checkpoints: Collector) -> list[dict[str, Any]]:
    if not checkpoints.messages:
        return []
    transcript = checkpoints.json()[-1]["snapshot"]["transcript"]
    return [r for results in results_by_call(transcript).values() for r in results]


@pytest.mark.timeout(120)
async def test_a_write_lease_survives_a_crash_of_the_service(
    settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    service = ServiceProcess(settings, tmp_path / "service.log")
    try:
        await service.start()
        await service.wait_ready(nc)
        ws = (await api(nc, subjects, "workspace", "add", {"root": str(project)}))["result"]["workspace"]["id"]
        writer, other = await project_session(nc, subjects, project, ws), await project_session(nc, subjects, project, ws)
        writer_cps = await Collector().attach(nc, subjects.checkpoint(writer))
        await publish_inbound(nc, subjects, inbound(writer, f"{write('shared.txt', 'mine')}\n/stall 60\n/say done"))
        await wait_for(lambda: tool_results(writer_cps), timeout_s=30, what="the writer's write")
        assert tool_results(writer_cps)[0]["ok"] is True
        await service.kill()  # mid-turn: the write is journaled, the turn is not finished

        await service.start()
        await service.wait_ready(nc)
        other_cps = await Collector().attach(nc, subjects.checkpoint(other))
        await publish_inbound(nc, subjects, inbound(other, f"{write('shared.txt', 'theirs')}\n/say tried"))
        await wait_for(lambda: tool_results(other_cps), timeout_s=30, what="the other session's write")
        refused = tool_results(other_cps)[0]
        assert refused["ok"] is False and "leased by another session" in str(refused["content"]), refused
        assert (project / "shared.txt").read_text() == "mine"
    finally:
        await service.stop()

"""SM-5, SM-6, SM-35 in turns: the file tools of a project session work inside its binding, and only there."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import results_by_call


async def ok(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any]) -> Any:
    reply = await api(nc, subjects, resource, verb, body)
    assert reply["ok"], reply
    return reply["result"]


async def tool_results(nc: Client, subjects: Subjects, sid: str, *calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Run one turn of ``sid`` calling each tool in its own round; the results in call order."""
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    text = "\n".join(f"/tool {name} {orjson.dumps(args).decode()}" for name, args in calls) + "\n/say done"
    await publish_inbound(nc, subjects, inbound(sid, text))
    await wait_for(lambda: any(cp["transition"] == "turn_ended" for cp in checkpoints.json()), what=f"{sid}'s turn")
    transcript = checkpoints.json()[-1]["snapshot"]["transcript"]
    by_call = results_by_call(transcript)
    ordered = [i["payload"]["id"] for i in transcript if i["kind"] == "tool_result"]
    return [next(r for r in by_call[cid]) for cid in ordered][-len(calls):]


@pytest.mark.rule("SM-5", "SM-6", "SM-35")
async def test_file_tools_work_in_a_project_session_and_its_child_and_stay_inside_the_binding(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    project, worktree, outside = tmp_path / "project", tmp_path / "wt", tmp_path / "outside"
    for d in (project / "src", worktree, outside):
        d.mkdir(parents=True)
    (project / "README").write_text("the project")
    (outside / "secret").write_text("not yours")
    ws = (await ok(nc, subjects, "workspace", "add", {"root": str(project)}))["workspace"]
    body = {"fields": {"id": f"proj-{uuid.uuid4().hex[:6]}"},
            "creation": {"created_from": "cli", "workspace": ws["id"], "work": {"root": str(project)}}}
    root = (await ok(nc, subjects, "session", "create", body))["id"]

    # SM-5: the root's binding reaches the engine; relative paths start at the root (no current_dir yet).
    got = await tool_results(nc, subjects, root,
                             ("read_file", {"path": "README"}),
                             ("write_file", {"path": "src/new.txt", "content": "written"}),
                             ("read_file", {"path": str(outside / "secret")}))
    assert got[0]["ok"] and "the project" in str(got[0]["content"]), got
    assert got[1]["ok"] and (project / "src" / "new.txt").read_text() == "written", got
    assert not got[2]["ok"] and "outside the work binding" in str(got[2]["content"]), got

    # SM-6: a child works in its root's binding from its own current_dir (copied, then its own).
    await ok(nc, subjects, "session", "set_current_dir", {"session_id": root, "current_dir": str(project / "src")})
    child = (await ok(nc, subjects, "session", "create_child", {"parent_id": root}))["id"]
    got = await tool_results(nc, subjects, child, ("read_file", {"path": "new.txt"}))
    assert got[0]["ok"] and "written" in str(got[0]["content"]), got

    # SM-35: a worktree added through the child is usable at the next turn of either session.
    (worktree / "branch.txt").write_text("on a branch")
    await ok(nc, subjects, "session", "add_worktree", {"session_id": child, "path": str(worktree)})
    got = await tool_results(nc, subjects, root, ("read_file", {"path": str(worktree / "branch.txt")}))
    assert got[0]["ok"] and "on a branch" in str(got[0]["content"]), got


async def test_a_session_without_a_binding_is_refused_file_tools(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    (tmp_path / "f").write_text("x")
    sid = f"plain-{uuid.uuid4().hex[:6]}"
    got = await tool_results(nc, subjects, sid, ("read_file", {"path": str(tmp_path / "f")}))
    assert not got[0]["ok"] and "no work binding" in str(got[0]["content"]), got

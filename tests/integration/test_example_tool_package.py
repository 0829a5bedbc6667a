"""docs/examples/turnstile-example-tools, pip-installed, is found through its ``turnstile.tools``
entry point by a service process and its tools run end to end through NATS (issue 16)."""

from __future__ import annotations

import os
import shutil
import subprocess
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
from tests.integration.service_process import ROOT, ServiceProcess
from tests.integration.tool_helpers import CHAT, tool_results, turn_ended

PACKAGE = ROOT / "docs" / "examples" / "turnstile-example-tools"


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package installed by pip into a directory of its own (not into the venv)."""
    source = tmp_path_factory.mktemp("example-src") / PACKAGE.name
    # pip builds in the source tree: build from a copy so the checkout stays clean.
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("example-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(source)],
        check=True, capture_output=True, timeout=300,
    )
    assert (next(target.glob("turnstile_example_tools-*.dist-info")) / "entry_points.txt").read_text().count("turnstile.tools") == 1
    return target


@pytest.fixture
async def worker(settings: Settings, tmp_path: Path, site_dir: Path) -> AsyncIterator[ServiceProcess]:
    env = {
        "PYTHONPATH": os.pathsep.join([str(site_dir), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "EXAMPLE_TICKETS_DIR": str(tmp_path),
    }
    proc = ServiceProcess(settings, tmp_path / "service.log", extra_env=env)
    try:
        yield proc
    finally:
        await proc.stop()


@pytest.mark.timeout(360)
async def test_the_installed_example_package_adds_its_tools_to_the_service(
    worker: ServiceProcess, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    sid = f"example-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await worker.start()
    await worker.wait_ready(nc)
    script = "\n".join([
        '/tool word_count {"text": "one two three"}',
        '/tool open_ticket {"title": "printer on fire", "priority": "high"}',
        '/tool open_ticket {"title": "' + "x" * 201 + '"}',
        "/say filed",
    ])
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: turn_ended(events), timeout_s=30, what="turn.ended")
    await wait_for(lambda: replies.messages, what="the reply")
    counted, opened, refused = tool_results(checkpoints)
    assert counted["content"] == "3" and counted["ok"] is True
    assert opened["ok"] is True and opened["content"].startswith("opened T-")
    assert refused["ok"] is False and refused["content"].startswith("error (invalid): arguments.title: ") and "too long" in refused["content"]
    [ticket] = [orjson.loads(line) for line in (tmp_path / "tickets.jsonl").read_text().splitlines()]
    assert ticket["title"] == "printer on fire" and ticket["session_id"] == sid
    assert [r["text"] for r in replies.json()] == ["filed"]

"""docs/examples/delivery_adapter.py: a durable outbound consumer that acks after delivery and resumes."""

from __future__ import annotations

import importlib.util
import uuid

import nats.errors
import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.cli_process import Live
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

pytestmark = pytest.mark.integration

ADAPTER = "docs/examples/delivery_adapter.py"


async def test_example_adapter_delivers_durably_and_resumes_after_a_kill(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    platform, sid = "demo", f"ad-{uuid.uuid4().hex[:6]}"
    args = [ADAPTER, "--server", settings.nats_url, "--prefix", settings.prefix, "--platform", platform]
    replies = await Collector().attach(nc, subjects.outbound(platform, sid))
    first = inbound(sid, '/tool reply {"text": "one"}\n/say two', platform=platform)
    await publish_inbound(nc, subjects, first)  # stored before the adapter ever ran
    await wait_for(lambda: len(replies.messages) == 2, what="two replies stored")

    adapter = await Live.start(*args)
    try:
        await adapter.wait_line("delivering", stream="stderr")
        delivered = [orjson.loads(line) for line in await adapter.wait_line('"text"', count=2)]
    finally:
        adapter.kill()  # SIGKILL: the durable consumer keeps its position on the server
        await adapter.proc.wait()
    assert [d["text"] for d in delivered] == ["one", "two"]
    assert delivered[0]["msg_id"].startswith(f"{sid}:") and delivered[0]["reply_to"] == first["id"]

    second = inbound(sid, "/say three", platform=platform)
    await publish_inbound(nc, subjects, second)
    await wait_for(lambda: len(replies.messages) == 3, what="the third reply stored")
    resumed = await Live.start(*args)
    try:
        lines = await resumed.wait_line('"text"')
    finally:
        code = await resumed.stop()
        assert code == 0, "\n".join(resumed.stderr)
    assert [orjson.loads(line)["text"] for line in lines] == ["three"]  # acked ones are not delivered again
    info = await nc.jetstream().consumer_info(subjects.outbound_stream, f"deliver-{platform}")
    assert info.num_ack_pending == 0 and info.num_pending == 0


class TimingOutPull:
    """A pull subscription whose fetch times out the way nats-py does on a loaded machine."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def fetch(self, batch: int, timeout: float) -> list[object]:  # noqa: ASYNC109 (nats-py's fetch(batch, timeout), called with timeout=)
        raise self.error


@pytest.mark.parametrize("error", [TimeoutError(), nats.errors.TimeoutError()])
async def test_example_adapter_asks_again_when_a_pull_times_out_either_way(error: Exception) -> None:
    # nats-py raises asyncio.TimeoutError (not its own) when its no-wait probe used the whole timeout;
    # the adapter crashed on it (exit 1 on Ctrl-C under load).
    spec = importlib.util.spec_from_file_location("delivery_adapter", ADAPTER)
    assert spec is not None and spec.loader is not None
    adapter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapter)
    assert await adapter.next_batch(TimingOutPull(error), 32) == []

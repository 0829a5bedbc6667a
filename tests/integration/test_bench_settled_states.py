"""The bench's phase boundary: stream states read once the streams stop growing (``settled_stream_states``)."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from bench.common import settled_stream_states, stream_states, wait_until
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects

PUBLISHES = 3000


async def test_a_phase_boundary_waits_for_the_publishes_still_coming_after_the_last_reply(
    nc: Client, settings: Settings, subjects: Subjects,
) -> None:
    # A service publishes turn.ended, usage and written-behind records after a phase's last reply;
    # read at once, the boundary counted them into the next phase's publish shape.
    js = nc.jetstream()
    await ensure_streams(js, settings, subjects)
    subject = f"{settings.prefix}.events.s1.turn.ended"
    published = 0

    async def trailing() -> None:
        nonlocal published
        for _ in range(PUBLISHES):
            await js.publish(subject, b"{}")
            published += 1

    task = asyncio.create_task(trailing())
    try:
        assert await wait_until(lambda: published > 0, 10)
        assert (await stream_states(js, subjects))["events"].last_seq < PUBLISHES  # still coming
        settled = await settled_stream_states(js, subjects, quiet_s=0.3)
        assert task.done()
        assert settled["events"].last_seq == PUBLISHES
        assert (await settled_stream_states(js, subjects, quiet_s=0.05)) == settled  # quiet: the same state
    finally:
        task.cancel()

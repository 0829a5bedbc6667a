"""Staging a fetched batch leaves no reference cycles behind (the served process's young collections
walk and free whatever the message path leaves cyclic: each such object lengthens their pauses)."""

from __future__ import annotations

import gc
from typing import Any

from consumers.health import ServiceHealth
from consumers.inbound_pipeline import InboundPipeline
from core.store.inbox import StagedMessage


class _Inbox:
    async def stage(self, staged: list[StagedMessage]) -> list[bool]:
        return [True] * len(staged)


async def _nothing(*_args: Any) -> None:
    return None


async def test_staging_a_batch_that_the_store_takes_leaves_no_cyclic_garbage() -> None:
    pipeline = InboundPipeline(
        None, _Inbox(), _nothing, ServiceHealth(None), max_in_flight=8, heartbeat_s=1.0  # type: ignore[arg-type]
    )
    staged = [StagedMessage("cli", "m1", "s1", 0, b"{}")]
    await pipeline._stage_in_place(staged, [])  # warm: whatever is created once
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert await pipeline._stage_in_place(staged, []) == [True]
        assert gc.collect() == 0
    finally:
        gc.enable()

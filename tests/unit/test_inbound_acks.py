"""A staged batch is acked only once staged (MQ-8), in stream order, without a task per message."""

from __future__ import annotations

import pytest

from consumers.health import ServiceHealth
from consumers.inbound_pipeline import InboundPipeline, InFlight
from core.store.inbox import StagedMessage
from schemas.wire import InboundMessage
from tests.loop_counts import TaskCount


class _Msg:
    def __init__(self, log: list[str], name: str) -> None:
        self.data = b"{}"
        self._log = log
        self._name = name

    async def ack(self) -> None:
        self._log.append(f"ack:{self._name}")


class _Inbox:
    def __init__(self, log: list[str]) -> None:
        self._log = log

    async def stage(self, staged: list[StagedMessage]) -> list[bool]:
        self._log.append(f"staged:{len(staged)}")
        return [True] * len(staged)


@pytest.mark.rule("MQ-8")
async def test_a_staged_batch_is_acked_after_staging_in_order_without_a_task_per_message() -> None:
    log: list[str] = []
    handed: list[str] = []

    async def handoff(staged: StagedMessage, inbound: InboundMessage) -> None:
        handed.append(staged.message_id)

    pipeline = InboundPipeline(
        None, _Inbox(log), handoff, ServiceHealth(None), max_in_flight=64, heartbeat_s=1.0  # type: ignore[arg-type]
    )
    batch = []
    for i in range(20):
        inbound = InboundMessage.model_validate(
            {"id": f"m{i}", "platform": "cli", "session_id": f"s{i % 3}", "text": "hi"}
        )
        batch.append(InFlight(_Msg(log, f"m{i}"), inbound, 0.0, generation=0))  # type: ignore[arg-type]
    with TaskCount() as tasks:
        await pipeline._stage(batch)
    assert log == ["staged:20", *(f"ack:m{i}" for i in range(20))]
    assert handed == [f"m{i}" for i in range(20)]
    assert tasks.created == 0, tasks.created

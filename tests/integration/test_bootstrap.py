"""The composition root (consumers/bootstrap.py): one immutable runtime, test replacements honoured."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from nats.aio.client import Client

from consumers.bootstrap import Replacements
from consumers.service import TurnstileService
from consumers.settings import Settings
from core.providers.scripted import ScriptedProvider
from core.store.journal_repo import SqlHistoryJournal
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

FIXED_CLOCK_S = 1_700_000_000.0


class CountingJournal:
    """Wraps the real journal; counts appends."""

    def __init__(self, inner: SqlHistoryJournal) -> None:
        self.inner = inner
        self.appends = 0

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        self.appends += 1
        return await self.inner.append(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_service_built_with_replacements_uses_them_for_its_turns(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    journals: list[CountingJournal] = []

    def wrap(real: SqlHistoryJournal) -> SqlHistoryJournal:
        journals.append(CountingJournal(real))
        return journals[-1]  # type: ignore[return-value]

    provider = ScriptedProvider(directives=True)
    service = TurnstileService(
        settings, Replacements(journal=wrap, provider=provider, clock=lambda: FIXED_CLOCK_S)
    )
    await service.start()
    try:
        runtime = service.runtime
        assert runtime is not None
        # Fully built at once: every part is there, none can be swapped afterwards.
        assert runtime.opener.provider is provider and runtime.opener.journal is journals[0]
        with pytest.raises(dataclasses.FrozenInstanceError):
            runtime.manager = None  # type: ignore[misc]
        sid = f"boot-{uuid.uuid4().hex[:6]}"
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        await publish_inbound(nc, subjects, inbound(sid, "hello"))
        await wait_for(lambda: replies.messages, what="a reply")
        assert journals[0].appends > 0
        manager = runtime.manager

        def ended_at() -> float | None:
            record = manager.get_session(sid)
            return record.last_turn.ended_at if record is not None and record.last_turn is not None else None

        assert await wait_for(ended_at, what="the turn bookkeeping") == FIXED_CLOCK_S
    finally:
        await service.stop()


async def test_a_service_that_is_not_serving_has_no_runtime(settings: Settings) -> None:
    service = TurnstileService(settings)
    assert service.runtime is None and service.manager is None and service.actors is None
    await service.stop()  # nothing was opened: nothing to close

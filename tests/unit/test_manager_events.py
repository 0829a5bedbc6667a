"""The session manager's event sink: what a deletion's session.deleted waits for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from consumers.manager_adapters import ManagerEvents


class RecordingPublisher:
    """Records the order of barrier waits and event publishes; acks everything at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stored_so_far(self) -> bool:
        self.calls.append("stored_so_far")
        return True

    async def emit(self, session_id: str, event_type: str, payload: Any) -> asyncio.Future[Any]:
        self.calls.append(f"emit {event_type}")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(1)
        return done

    async def settle(self, futures: list[asyncio.Future[Any]]) -> bool:
        return True


@pytest.mark.rule("SM-22")
async def test_session_deleted_is_published_only_after_everything_sent_before_it_is_stored() -> None:
    # A reply sent just before the generation changed must be stored before session.deleted; the
    # outbound and events streams store independently, so the event waits for the earlier acks.
    publisher = RecordingPublisher()
    events = ManagerEvents(publisher)  # type: ignore[arg-type]
    await events.emit_all([("a", "session.deleted", {}), ("b", "session.deleted", {})])
    assert publisher.calls == ["stored_so_far", "emit session.deleted", "emit session.deleted"]


async def test_other_session_events_do_not_wait_for_earlier_publishes() -> None:
    publisher = RecordingPublisher()
    events = ManagerEvents(publisher)  # type: ignore[arg-type]
    await events.emit_all([("a", "session.created", {})])
    assert publisher.calls == ["emit session.created"]

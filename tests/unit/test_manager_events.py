"""The session manager's event sink: a deletion's barrier and its chunk of session.deleted events."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def test_the_barrier_is_the_publishers_and_a_chunk_does_not_wait_for_it_again() -> None:
    # The manager waits once before a deletion's first chunk (tests/unit/sessions/test_manager_deletion.py);
    # the sink's barrier is the publisher's, and emitting a chunk adds none of its own.
    publisher = RecordingPublisher()
    events = ManagerEvents(publisher)  # type: ignore[arg-type]
    await events.stored_so_far()
    await events.emit_all([("a", "session.deleted", {}), ("b", "session.deleted", {})])
    assert publisher.calls == ["stored_so_far", "emit session.deleted", "emit session.deleted"]

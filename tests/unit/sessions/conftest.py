"""Fixtures for the session-manager unit tests: a fake clock, the in-memory ports, a manager factory."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import pytest

from core.sessions.manager import SessionManager
from core.sessions.platforms import AdapterInstance, OwnerIdentities, PlatformRegistry
from tests.fakes.session_repo import InMemorySessionRepository, RecordingEventSink

START_EPOCH_S = 1_793_620_800.0  # 2026-11-02 12:00 UTC


@dataclass
class FakeClock:
    """A clock that moves only when told."""

    now_s: float = START_EPOCH_S

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> float:
        self.now_s += seconds
        return self.now_s


@dataclass
class ClearLog:
    """A clear_session_data hook that records which sessions it cleared."""

    cleared: list[str] = field(default_factory=list)

    async def __call__(self, session_ids: Sequence[str]) -> None:
        self.cleared.extend(session_ids)


def new_id(prefix: str = "s") -> str:
    """A unique session id for one test."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def repo() -> InMemorySessionRepository:
    return InMemorySessionRepository()


@pytest.fixture
def sink() -> RecordingEventSink:
    return RecordingEventSink()


@pytest.fixture
def clear_log() -> ClearLog:
    return ClearLog()


ManagerFactory = Callable[..., Awaitable[SessionManager]]


@pytest.fixture
def make_manager(
    repo: InMemorySessionRepository, sink: RecordingEventSink, clock: FakeClock, clear_log: ClearLog
) -> ManagerFactory:
    """Build and start a manager over the shared in-memory repo (call again = a restart)."""

    async def build(
        instances: list[AdapterInstance] | None = None,
        owners: list[tuple[str, str]] | None = None,
        no_authority: bool = False,
    ) -> SessionManager:
        manager = SessionManager(
            repo,
            sink,
            registry=PlatformRegistry(instances or []),
            owners=None if no_authority else OwnerIdentities(owners or [("telegram", "owner-1")]),
            clear_session_data=clear_log,
            clock=clock,
        )
        await manager.start()
        sink.clear()
        return manager

    return build


@pytest.fixture
async def manager(make_manager: ManagerFactory) -> SessionManager:
    return await make_manager()

"""Fixtures for engine unit tests: in-memory ports, a session factory, a checkpoint recorder."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.engine import (
    LeaseRegistry,
    RuntimeModel,
    SameSessionOnly,
    Session,
    SessionOptions,
    builtin_registry,
)
from core.providers import ScriptedProvider
from tests.fakes.journal import InMemoryJournal
from tests.fakes.knowledge import InMemoryKnowledgeStore

PROMPT = "You are the test agent."


class Recorder:
    """A checkpoint callback that keeps every snapshot; can be told to fail at call N."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.snapshots: list[dict[str, Any]] = []
        self.fail_at = fail_at

    async def __call__(self, snapshot: dict[str, Any]) -> None:
        if self.fail_at is not None and len(self.snapshots) == self.fail_at:
            raise RuntimeError("broker down")
        self.snapshots.append(snapshot)

    def last_entry_kinds(self) -> list[str]:
        """Kind (or event type) of the newest transcript item / event per snapshot."""
        out = []
        for snap in self.snapshots:
            newest_item = snap["transcript"][-1] if snap["transcript"] else None
            newest_event = snap["events"][-1] if snap["events"] else None
            if newest_event and (newest_item is None or newest_event["seq"] > newest_item["seq"]):
                out.append(f"event:{newest_event['type']}")
            else:
                out.append(newest_item["kind"] if newest_item else "")
        return out


class StepClock:
    """A deterministic clock: each call is one second later."""

    def __init__(self) -> None:
        self.now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


SessionFactory = Callable[..., Awaitable[Session]]


@pytest.fixture
def journal() -> InMemoryJournal:
    return InMemoryJournal()


@pytest.fixture
def knowledge() -> InMemoryKnowledgeStore:
    return InMemoryKnowledgeStore()


@pytest.fixture
def leases() -> LeaseRegistry:
    return LeaseRegistry()


@pytest.fixture
def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_session(
    journal: InMemoryJournal, knowledge: InMemoryKnowledgeStore, leases: LeaseRegistry, session_id: str
) -> SessionFactory:
    """Open (or reopen) the test session; keyword overrides go to ``Session.open``."""

    async def factory(**overrides: Any) -> Session:
        kwargs: dict[str, Any] = {
            "session_id": session_id,
            "system_prompt": PROMPT,
            "runtime": RuntimeModel(model="test-model", reasoning_effort="low", context_window_tokens=100_000),
            "options": SessionOptions.conversation("im-dm", ["root"]),
            "journal": journal,
            "provider": ScriptedProvider(directives=True),
            "tools": builtin_registry(),
            "knowledge": knowledge,
            "take_policy": SameSessionOnly(),
            "leases": leases,
            "clock": StepClock(),
        }
        kwargs.update(overrides)
        return await Session.open(**kwargs)

    return factory

"""Journal entries before they have a seq, and the checkpoint callback that follows a commit.

A leaf of the engine: the session and the helpers that build its entries (openings,
completion, group context, context recovery, the turn loop) all share these types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.engine.journal import EntryKind
from core.engine.snapshot import EncodedSnapshot

# A checkpoint callback receives the complete snapshot (KS-20) as an ``EncodedSnapshot``:
# a read-only mapping equal to ``Session.snapshot()`` that also carries its JSON bytes.
Checkpoint = Callable[[EncodedSnapshot], Awaitable[None]]


@dataclass
class Draft:
    """An entry before it has a seq."""

    kind: EntryKind
    payload: dict[str, Any]
    turn_id: str | None = None
    external_event_id: str | None = None


def interrupted_result(call_id: str, name: str, why: str) -> dict[str, Any]:
    """Payload of a durable interrupted tool result."""
    return {"id": call_id, "name": name, "ok": False, "interrupted": True, "content": f"interrupted: {why}"}


__all__ = ["Checkpoint", "Draft", "interrupted_result"]

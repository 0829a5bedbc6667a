"""What the control operations act on, built once by ``consumers/bootstrap.py``.

Each operation area takes only the parts it uses from here (``control_operations``), so no
operation reaches into the service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import tzinfo

from consumers.actors import ActorRegistry
from consumers.session_opener import SessionOpener
from consumers.shared_state import SharedState
from core.sessions.manager import SessionManager


async def _no_checkpoint(session_id: str) -> tuple[int, bytes] | None:
    return None


@dataclass(frozen=True)
class ControlParts:
    """The running parts behind the control API."""

    manager: SessionManager
    actors: ActorRegistry
    opener: SessionOpener
    clear_history: Callable[[str], Awaitable[bool]]
    max_payload_bytes: Callable[[], int]  # the connected server's limit, read when a list is paged
    time_zone: tzinfo
    shared: SharedState  # records other processes wrote (read-through), persisted platform registrations
    last_checkpoint: Callable[[str], Awaitable[tuple[int, bytes] | None]] = _no_checkpoint  # time travel's header

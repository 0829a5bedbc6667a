"""Time travel over the control API: ``session.state_versions`` and ``session.state_at``.

The journal (SQL) holds every step of a session's current generation and the state is a
pure fold over it (``core.engine.time_travel``), so any process answers these without the
session's actor or a load: the fields the journal does not carry (mode, channel, runtime,
prompt, work) come from the session's latest checkpoint (one direct get) or, when it has
none of this generation, from the options a fresh open would use — as a load does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson

from consumers.api import Operation
from consumers.paging import paginate
from consumers.session_opener import SessionOpener
from consumers.turn_inputs import chat_of, work_of
from core.engine.journal import EntryKind, JournalEntry
from core.engine.snapshot import state_from_snapshot
from core.engine.state import SessionState
from core.engine.time_travel import snapshot_at, system_prompt_of
from core.errors import NotFound, TurnstileError
from core.sessions.manager import SessionManager
from schemas.time_travel import HeaderSource, StateAtOut, StateAtRequest, StateVersionOut, StateVersionsRequest
from schemas.wire import Checkpoint, Page

log = logging.getLogger(__name__)

LastCheckpoint = Callable[[str], Awaitable[tuple[int, bytes] | None]]
"""The session's newest checkpoint as (stream sequence, payload), or None (``Publisher.last_checkpoint``)."""


def _version_out(entry: JournalEntry) -> StateVersionOut:
    kind = entry.kind.value
    event_type = entry.payload.get("type") if entry.kind == EntryKind.EVENT else None
    return StateVersionOut(state_version=entry.seq + 1, kind=kind, type=event_type, turn_id=entry.turn_id, at=entry.at)


def operations(
    manager: SessionManager, opener: SessionOpener, last_checkpoint: LastCheckpoint, budget_bytes: Callable[[], int]
) -> list[Operation]:
    """The time-travel operations: they read the journal (the opener's), generations and checkpoints."""

    async def journal_of(session_id: str) -> tuple[int, list[JournalEntry]]:
        # The current generation only: the steps of a deleted generation are not this session's.
        generation = manager.generation_of(session_id)
        entries = await opener.journal.load(session_id, generation=generation)
        if not entries and manager.get_session(session_id) is None:
            raise NotFound(f"session {session_id!r} not found")
        return generation, entries

    async def header_of(session_id: str, generation: int) -> tuple[SessionState, str, HeaderSource]:
        """The session's header state, its system prompt, and where they came from."""
        last = await last_checkpoint(session_id)
        if last is not None:
            try:
                checkpoint = Checkpoint.model_validate(orjson.loads(last[1]))
                prompt = system_prompt_of(checkpoint.snapshot)
                if checkpoint.generation == generation and prompt is not None:
                    return state_from_snapshot(checkpoint.snapshot), prompt, "checkpoint"
            except (ValueError, TurnstileError) as exc:  # as a load does: an unreadable one is passed over
                log.warning("session %s: unreadable checkpoint at %d (%r); header from options", session_id,
                            last[0], exc)
        fresh = await opener.open(session_id, None, generation=generation, chat=chat_of(manager, session_id, None),
                                  new=True)  # nothing is read or written: a fresh state from options
        fresh.bind_work(work_of(manager, session_id))
        return fresh.state, fresh.system_prompt, "options"

    async def state_versions(req: StateVersionsRequest) -> Page[StateVersionOut]:
        _, entries = await journal_of(req.session_id)
        return paginate(entries, key=lambda e: (e.seq,), render=_version_out,
                        limit=req.limit, cursor=req.cursor, budget_bytes=budget_bytes())

    async def state_at(req: StateAtRequest) -> StateAtOut:
        generation, entries = await journal_of(req.session_id)
        if req.state_version > len(entries):
            raise NotFound(f"session {req.session_id!r} has state versions 1..{len(entries)}, not {req.state_version}"
                           if entries else f"session {req.session_id!r} has no journaled steps")
        header, prompt, source = await header_of(req.session_id, generation)
        snapshot = snapshot_at(header, entries, req.state_version, prompt)
        return StateAtOut(session_id=req.session_id, generation=generation, state_version=req.state_version,
                          latest_version=len(entries), header_from=source,
                          snapshot=snapshot)

    return [
        Operation("session", "state_versions", StateVersionsRequest, state_versions,
                  "the journaled steps of the session's current generation (state versions, kinds, times), paged"),
        Operation("session", "state_at", StateAtRequest, state_at,
                  "the complete snapshot of the session at a state version, rebuilt from its journal"),
    ]

"""Time travel: a session's complete snapshot at any state version, rebuilt from its journal.

A checkpoint stream keeps only the last few snapshots of a session (they are complete, so
each costs tens of KB), but the journal keeps every step and the state is a pure fold over
it (``core.engine.reducer``): the snapshot at ``state_version`` N is the fold of the first
N entries, built as ``core.engine.snapshot`` builds it.

What the journal does not carry is the session's *header*: what it was opened with (mode,
channel, roots, max rounds, …) and what the caller sets at every open (``runtime``, the
system prompt and its sha256, ``work``). ``snapshot_at`` takes it from a state of the same
session (the latest checkpoint's, or a fresh open's) — so those fields are the header's at
every version, not necessarily the ones a checkpoint of that version carried if the
settings or the work binding changed in between. One more: ``group_context`` starts as
the opened value and each controller box replaces it; a header that already folded a box
no longer holds the opened value, which is then taken as empty (how the service opens
every session; only ``session.group_context`` sets it, through a box).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from core.engine.chatend import chatend_text, project_transcript, render_messages
from core.engine.journal import EntryKind, JournalEntry
from core.engine.reducer import apply
from core.engine.snapshot import FORMAT_VERSION, status_of
from core.engine.state import KnowledgePlan, SessionState
from core.errors import InvalidInput, NotFound

HEADER_FIELDS = frozenset({
    "session_id", "session_type", "system_prompt_sha256", "runtime", "mode", "channel", "free_time",
    "orchestration", "group_context", "provenance_id", "source_session_type", "managed_source_session_id",
    "root_node_ids", "reference_root_node_ids", "work", "max_rounds",
})
"""The ``SessionState`` fields no journal entry sets (``orchestration`` and ``group_context``
start from them; the fold changes ``orchestration["state"]`` and replaces ``group_context``)."""


def opened_state(header: SessionState, *, group_context_folded: bool) -> SessionState:
    """``header``'s session as it was opened: its header fields, every journal-derived field fresh.

    ``started_at`` and the write session id are placeholders the journal's first entry (the
    ``created`` event) overwrites. ``group_context_folded``: ``header`` already folded a
    controller box, so its group context is not the opened one (taken as empty).
    """
    data = header.model_dump(include=set(HEADER_FIELDS))
    data["orchestration"] = {**data["orchestration"], "state": "idle"}
    if group_context_folded:
        data["group_context"] = {}
    data["started_at"] = header.started_at
    data["knowledge_plan"] = KnowledgePlan(write_session_id=header.knowledge_plan.write_session_id)
    return SessionState.model_validate(data)


def state_at(header: SessionState, entries: Sequence[JournalEntry], state_version: int) -> SessionState:
    """The accepted state after folding the first ``state_version`` entries into ``header``'s opened state.

    ``entries`` is the session's journal (one generation) in ``seq`` order. Raises InvalidInput
    for a version below 1 and NotFound past the journal's end.
    """
    if state_version < 1:
        raise InvalidInput(f"state_version must be at least 1 (got {state_version})")
    if state_version > len(entries):
        raise NotFound(
            f"session {header.session_id!r} has state versions 1..{len(entries)}, not {state_version}"
            if entries else f"session {header.session_id!r} has no journaled steps"
        )
    folded_box = any(e.kind == EntryKind.BOX and e.seq < header.next_seq for e in entries)
    state = opened_state(header, group_context_folded=folded_box)
    for expected, entry in enumerate(entries[:state_version]):
        if entry.seq != expected:
            raise InvalidInput(f"journal of {header.session_id!r} has a gap before seq {entry.seq}")
        apply(state, entry)
    return state


def snapshot_of(state: SessionState, system_prompt: str) -> dict[str, Any]:
    """The complete snapshot of ``state``: ``build_snapshot``'s value, keys in ``encode_snapshot``'s order.

    Unlike those it uses no memo (the transcript belongs to no live session), and
    ``orjson.dumps`` of the result is the bytes a checkpoint of this state carries.
    """
    messages = project_transcript(state.transcript)
    data = state.model_dump(mode="json", exclude={"transcript"})
    data["transcript"] = list(state.transcript)
    data["format_version"] = FORMAT_VERSION
    data["state_version"] = state.next_seq
    data["status"] = status_of(state)
    data["projection"] = messages
    data["chatend_text"] = chatend_text(system_prompt, messages)
    return data


def snapshot_at(
    header: SessionState, entries: Sequence[JournalEntry], state_version: int, system_prompt: str
) -> dict[str, Any]:
    """The complete snapshot (KS-20) of the session at ``state_version``, rebuilt from its journal."""
    return snapshot_of(state_at(header, entries, state_version), system_prompt)


def system_prompt_of(snapshot: Mapping[str, Any]) -> str | None:
    """The system prompt a snapshot was rendered with, read back from its chatend text.

    None unless the text is exactly ``[system]``, the prompt and the projection's blocks
    and the prompt's sha256 is the snapshot's ``system_prompt_sha256``.
    """
    text = snapshot.get("chatend_text")
    projection = snapshot.get("projection")
    if not isinstance(text, str) or not isinstance(projection, list):
        return None
    head, blocks = "[system]\n", render_messages(projection)
    if not text.startswith(head) or not text.endswith("\n\n" + blocks):
        return None
    prompt = text[len(head): len(text) - len(blocks) - 2]
    if hashlib.sha256(prompt.encode("utf-8")).hexdigest() != snapshot.get("system_prompt_sha256"):
        return None
    return prompt

"""History ingress (KS-16): read a terminated conversation's history into an ingress session."""

from __future__ import annotations

from typing import Any

from core.engine.chatend import project_messages, render_messages
from core.engine.journal import EntryKind, HistoryJournal, JournalEntry
from core.engine.options import AgentMode, SessionOptions
from core.engine.reducer import transcript_item
from core.engine.state import SessionState, TranscriptItem


def transcript_from_entries(entries: list[JournalEntry]) -> list[TranscriptItem]:
    """The (compacted) transcript items of a journal, without the rest of the state."""
    items: list[TranscriptItem] = []
    for entry in entries:
        if entry.kind == EntryKind.EVENT:
            continue
        if entry.kind == EntryKind.SUMMARY:
            covers = int(entry.payload["covers_through_seq"])
            items = [transcript_item(entry), *[i for i in items if i["seq"] > covers]]
        else:
            items.append(transcript_item(entry))
    return items


class JournalHistoryReader:
    """``HistoryReader`` over a journal: a session's model-visible messages as text."""

    def __init__(self, journal: HistoryJournal) -> None:
        self._journal = journal

    async def read_history(self, session_id: str, limit_chars: int) -> str | None:
        """The newest ``limit_chars`` characters of the rendered messages; None if no history."""
        entries = await self._journal.load(session_id)
        if not entries:
            return None
        text = render_messages(project_messages(transcript_from_entries(entries)))
        return text[-limit_chars:] if limit_chars > 0 else ""


def ingress_options(
    conversation: SessionState, *, record_id: str, instructions: str | None = None
) -> SessionOptions:
    """Options of the ingress session for a conversation whose source terminated: same
    roots, mode ``ingress(record_id)``, source type recorded; ``instructions`` are
    appended to the opening text verbatim."""
    channel: dict[str, Any] = {"instructions": instructions} if instructions else {}
    return SessionOptions(
        session_type=conversation.session_type,
        root_node_ids=list(conversation.root_node_ids),
        reference_root_node_ids=list(conversation.reference_root_node_ids),
        channel=channel,
        mode=AgentMode.ingress(record_id),
        source_session_type=conversation.session_type,
        provenance_id=conversation.session_id,
    )

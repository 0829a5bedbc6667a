"""Resolved objects (KS-11)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from core.engine.journal import HistoryJournal
from core.errors import NotFound


@dataclass(frozen=True)
class ResolvedObject:
    """Exact bytes with the authoritative file name, media type and native transport hint."""

    object_id: str
    data: bytes
    file_name: str
    media_type: str
    transport_kind: str | None


def transport_kind_for(media_type: str) -> str:
    """The delivery hint adapters use to pick a native message type."""
    major = media_type.split("/", 1)[0]
    return {"image": "photo", "audio": "audio", "video": "video"}.get(major, "document")


async def object_bytes_from_journal(journal: HistoryJournal, session_id: str, object_id: str, seq: int) -> bytes:
    """Load a pending object's bytes from its journal entry."""
    for entry in await journal.load(session_id):
        if entry.seq == seq and entry.payload.get("object_id") == object_id:
            return base64.b64decode(entry.payload.get("data_b64", ""))
    raise NotFound(f"object {object_id!r} is missing from the journal")

"""Resolved objects (KS-11)."""

from __future__ import annotations

from dataclasses import dataclass


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

"""The inbound attachment rules, checked at the edge (before a session is filed) and used again
when the turn turns attachments into objects: a plain file name, valid base64, bounded bytes."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from core.engine.file_names import validate_delivery_file_name
from core.engine.objects import transport_kind_for
from core.errors import InvalidInput, TooLarge


def base64_decoded_size(data_base64: str) -> int:
    """How many bytes strict base64 (no whitespace) decodes to, known without decoding it."""
    return len(data_base64.rstrip("=")) * 3 // 4


def inline_attachment_bytes(file_name: str, data_base64: str, max_bytes: int | None = None) -> bytes:
    """Decode an attachment's inline bytes; TooLarge over ``max_bytes`` (checked before decoding
    allocates them), InvalidInput when the text is not strict base64."""
    if max_bytes is not None and base64_decoded_size(data_base64) > max_bytes:
        raise TooLarge(
            f"attachment {file_name!r}: inline data is {base64_decoded_size(data_base64)} bytes; the limit is {max_bytes}"
        )
    try:
        data = base64.b64decode(data_base64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"attachment {file_name!r}: data_base64 is not valid base64") from exc
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLarge(f"attachment {file_name!r}: inline data is {len(data)} bytes; the limit is {max_bytes}")
    return data


def check_inbound_attachment(file_name: object, data_base64: str | None, max_bytes: int) -> str:
    """Return the file name if the attachment keeps every rule; else InvalidInput or TooLarge."""
    name = validate_delivery_file_name(file_name)
    if data_base64 is not None:
        inline_attachment_bytes(name, data_base64, max_bytes)
    return name


def attachment_drafts(
    attachments: list[dict[str, Any]], new_id: Callable[[str], str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Object payloads for attachments carrying bytes, and the attachment list for the message."""
    objects: list[dict[str, Any]] = []
    listed: list[dict[str, Any]] = []
    for raw in attachments:
        if not isinstance(raw, dict):
            raise InvalidInput("each attachment must be an object")
        file_name = validate_delivery_file_name(raw.get("file_name"))
        media_type = str(raw.get("media_type") or "application/octet-stream")
        object_id = str(raw.get("id") or new_id("att"))
        listed.append({"id": object_id, "file_name": file_name, "media_type": media_type})
        if raw.get("data_base64") is not None:
            data = inline_attachment_bytes(file_name, str(raw["data_base64"]))
            objects.append({
                "object_id": object_id, "file_name": file_name, "media_type": media_type,
                "transport_kind": transport_kind_for(media_type), "size": len(data), "delivery": False,
                "data_b64": base64.b64encode(data).decode("ascii"),
            })
    return objects, listed

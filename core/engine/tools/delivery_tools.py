"""reply and send_object: the tool-side ways a turn delivers to the user."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from core.engine.file_names import validate_delivery_file_name
from core.engine.objects import transport_kind_for
from core.engine.tools.context import ToolContext
from core.engine.tools.registry import StagedEntry, ToolDefinition, ToolOutcome, obj
from core.errors import InvalidInput, TooLarge

MAX_OBJECT_BYTES = 20 * 1024 * 1024
DELIVERY_MODES = frozenset({"conversation", "wakeup"})


async def _reply(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    text = args["text"]
    if not text.strip():
        raise InvalidInput("reply text must not be blank")
    return ToolOutcome(ok=True, content="delivered", entries=[StagedEntry("reply", {"text": text})])


async def _send_object(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    file_name = validate_delivery_file_name(args["file_name"])
    media_type = args.get("media_type") or "application/octet-stream"
    sources = [k for k in ("text", "data_base64") if k in args]
    if len(sources) != 1:
        raise InvalidInput("give exactly one of text or data_base64")
    if "text" in args:
        data = args["text"].encode("utf-8")
    else:
        try:
            data = base64.b64decode(args["data_base64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidInput(f"data_base64 is not valid base64: {exc}") from exc
    if len(data) > MAX_OBJECT_BYTES:
        raise TooLarge(f"object is {len(data)} bytes; the limit is {MAX_OBJECT_BYTES}")
    object_id = ctx.new_id("hobj")
    payload = {
        "object_id": object_id,
        "file_name": file_name,
        "media_type": media_type,
        "transport_kind": transport_kind_for(media_type),
        "size": len(data),
        "delivery": True,
        "data_b64": base64.b64encode(data).decode("ascii"),
    }
    return ToolOutcome(
        ok=True,
        content=f"sent {file_name} ({len(data)} bytes) as object {object_id}",
        entries=[StagedEntry("object", payload)],
    )


REPLY = ToolDefinition(
    name="reply",
    description="Send a text message to the user now, before the turn ends.",
    parameters=obj({"text": {"type": "string", "minLength": 1}}, ["text"]),
    handler=_reply,
    modes=DELIVERY_MODES,
)

SEND_OBJECT = ToolDefinition(
    name="send_object",
    description="Send a file to the user. Give file_name and either text or data_base64.",
    parameters=obj(
        {
            "file_name": {"type": "string", "minLength": 1},
            "media_type": {"type": "string"},
            "text": {"type": "string"},
            "data_base64": {"type": "string"},
        },
        ["file_name"],
    ),
    handler=_send_object,
    modes=DELIVERY_MODES,
)

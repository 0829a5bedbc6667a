"""Two example turnstile tools, exported as ``TOOLS`` for the ``turnstile.tools`` entry point."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from core.engine.tools import ToolContext, custom_tool


@custom_tool(
    name="word_count",
    description="Count the words of a text.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    modes=["conversation", "free_time"],
    idempotent=True,
    timeout_s=5,
)
async def word_count(ctx: ToolContext, args: dict[str, Any]) -> str:
    return str(len(args["text"].split()))


@custom_tool(
    name="open_ticket",
    description="Open a support ticket; returns its id.",
    parameters={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "priority": {"enum": ["low", "normal", "high"]},
        },
        "required": ["title"],
        "additionalProperties": False,
    },
    modes=["conversation"],
    idempotent=False,  # a second run would open a second ticket
    timeout_s=10,
)
async def open_ticket(ctx: ToolContext, args: dict[str, Any]) -> str:
    ticket = {"id": f"T-{uuid.uuid4().hex[:8]}", "session_id": ctx.session_id, **args}
    directory = Path(os.environ.get("EXAMPLE_TICKETS_DIR", "."))
    with (directory / "tickets.jsonl").open("a") as out:
        out.write(json.dumps(ticket) + "\n")
    return f"opened {ticket['id']}"


TOOLS = [word_count, open_ticket]

"""Group context (KS-15): the channel context of a multi-party chat, refreshed by the controller."""

from __future__ import annotations

from typing import Any

from core.engine.drafts import Checkpoint
from core.engine.journal import EntryKind
from core.engine.recovery import recover_context
from core.engine.session_port import SessionPort
from core.errors import InvalidInput


def is_group(channel: dict[str, Any]) -> bool:
    """A group session: the channel's chat is declared multi-party."""
    chat = channel.get("chat")
    return isinstance(chat, dict) and chat.get("multi_party") is True


async def refresh_group_context(
    session: SessionPort, context: dict[str, Any], current_message_id: str | None, checkpoint: Checkpoint | None
) -> bool:
    """KS-15: no-op outside groups; else one controller update box, then context recovery."""
    if not is_group(session.state.channel):
        return False
    if not isinstance(context, dict):
        raise InvalidInput("group context must be an object")
    payload = {"box_id": session.new_id("box"), "context": context, "current_message_id": current_message_id}
    await session.commit([session.draft(EntryKind.BOX, payload)], checkpoint)
    await recover_context(session, checkpoint)
    return True

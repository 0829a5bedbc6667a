"""The core shape of one inbound chat message (the NATS consumer maps its wire model onto it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatScope:
    """The chat a message came from, as the adapter described it.

    ``declared_one_to_one`` is True only when the adapter explicitly declared the
    window one-to-one (an inferred one-to-one does not count, SM-26).
    """

    type: str
    target_id: str
    multi_party: bool
    declared_one_to_one: bool = False
    name: str | None = None


@dataclass(frozen=True)
class Sender:
    """Who sent the message: an account on the message's platform."""

    user_id: str
    name: str | None = None


@dataclass(frozen=True)
class IncomingMessage:
    """One inbound chat event. ``source`` set = not a native inbound (relayed, system, …)."""

    id: str
    session_id: str | None
    platform: str
    instance: str | None = None
    self_id: str | None = None
    chat: ChatScope | None = None
    sender: Sender | None = None
    source: str | None = None
    text: str = ""

"""The session-manager domain (seed 003): records, rules, take rules, places and the manager."""

from core.sessions.fields import SessionCreation, SessionFields, SessionUpdate
from core.sessions.incoming_message import ChatScope, IncomingMessage, Sender
from core.sessions.manager import ANY_PARENT, SessionManager
from core.sessions.platforms import AdapterInstance, OwnerIdentities, PlatformRegistry
from core.sessions.ports import EventSink, SessionRepository, StoreChange, StoredState
from core.sessions.records import (
    LastTurn,
    OriginChat,
    PlaceRecord,
    SessionPlace,
    SessionRecord,
    TakeSettings,
    TokenUsage,
    WorkBinding,
    WorkspaceRecord,
)
from core.sessions.take import TAKE_UNKNOWN, Principal, TakeVerdict, take_from
from core.sessions.text import TextRef

__all__ = [
    "ANY_PARENT",
    "TAKE_UNKNOWN",
    "AdapterInstance",
    "ChatScope",
    "EventSink",
    "IncomingMessage",
    "LastTurn",
    "OriginChat",
    "OwnerIdentities",
    "PlaceRecord",
    "PlatformRegistry",
    "Principal",
    "Sender",
    "SessionCreation",
    "SessionFields",
    "SessionManager",
    "SessionPlace",
    "SessionRecord",
    "SessionRepository",
    "SessionUpdate",
    "StoreChange",
    "StoredState",
    "TakeSettings",
    "TakeVerdict",
    "TextRef",
    "TokenUsage",
    "WorkBinding",
    "WorkspaceRecord",
    "take_from",
]

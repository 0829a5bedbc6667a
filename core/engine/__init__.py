"""The session lifecycle engine (KS-1..KS-21): pure-ish async core behind small ports."""

from __future__ import annotations

from core.engine.drafts import Checkpoint, Draft
from core.engine.file_names import validate_delivery_file_name
from core.engine.ingress import JournalHistoryReader, ingress_options
from core.engine.journal import (
    EntryKind,
    GenerationalJournal,
    HistoryJournal,
    JournalEntry,
    JournalOfGeneration,
    JournalReadAhead,
)
from core.engine.knowledge import KnowledgeNode, KnowledgeObject, KnowledgeStore
from core.engine.objects import ResolvedObject
from core.engine.options import AgentMode, RuntimeModel, SessionOptions, WorkBinding
from core.engine.policy import MidTurnAction, MidTurnPolicy, decide_mid_turn
from core.engine.ports import HistoryReader, SameSessionOnly, TakePolicy, TakeVerdict
from core.engine.session import Session
from core.engine.snapshot import FORMAT_VERSION, Snapshot
from core.engine.tools import LeaseRegistry, ToolDefinition, ToolRegistry, builtin_registry
from core.engine.turn_loop import TurnExhausted

__all__ = [
    "FORMAT_VERSION",
    "AgentMode",
    "Checkpoint",
    "Draft",
    "EntryKind",
    "GenerationalJournal",
    "HistoryJournal",
    "HistoryReader",
    "JournalEntry",
    "JournalHistoryReader",
    "JournalOfGeneration",
    "JournalReadAhead",
    "KnowledgeNode",
    "KnowledgeObject",
    "KnowledgeStore",
    "LeaseRegistry",
    "MidTurnAction",
    "MidTurnPolicy",
    "ResolvedObject",
    "RuntimeModel",
    "SameSessionOnly",
    "Session",
    "SessionOptions",
    "Snapshot",
    "TakePolicy",
    "TakeVerdict",
    "ToolDefinition",
    "ToolRegistry",
    "TurnExhausted",
    "WorkBinding",
    "builtin_registry",
    "decide_mid_turn",
    "ingress_options",
    "validate_delivery_file_name",
]

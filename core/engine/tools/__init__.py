"""Tools: the registry and the built-in tool set."""

from __future__ import annotations

from core.engine.tools.context import ToolContext
from core.engine.tools.custom import custom_tool
from core.engine.tools.delivery_tools import REPLY, SEND_OBJECT
from core.engine.tools.file_tools import LIST_DIR, READ_FILE, WRITE_FILE
from core.engine.tools.knowledge_tools import KNOWLEDGE_READ, KNOWLEDGE_SEARCH, KNOWLEDGE_WRITE
from core.engine.tools.leases import LeaseRegistry
from core.engine.tools.registry import (
    StagedEntry,
    ToolDefinition,
    ToolOutcome,
    ToolRegistry,
    validate_arguments,
)
from core.engine.tools.session_tools import FINISH, READ_SESSION_HISTORY, TRANSCRIBE_AUDIO

BUILTIN_TOOLS = (
    REPLY,
    SEND_OBJECT,
    KNOWLEDGE_READ,
    KNOWLEDGE_SEARCH,
    KNOWLEDGE_WRITE,
    READ_SESSION_HISTORY,
    TRANSCRIBE_AUDIO,
    FINISH,
    READ_FILE,
    WRITE_FILE,
    LIST_DIR,
)


def builtin_registry(extra: list[ToolDefinition] | None = None) -> ToolRegistry:
    """A registry with every built-in tool plus ``extra``."""
    return ToolRegistry([*BUILTIN_TOOLS, *(extra or [])])


__all__ = [
    "BUILTIN_TOOLS",
    "LeaseRegistry",
    "StagedEntry",
    "ToolContext",
    "ToolDefinition",
    "ToolOutcome",
    "ToolRegistry",
    "builtin_registry",
    "custom_tool",
    "validate_arguments",
]

"""Model providers behind the ``Provider`` port."""

from __future__ import annotations

from core.providers.base import (
    ModelRequest,
    ModelResponse,
    Provider,
    ToolCall,
    ToolSpec,
    Transcription,
    Usage,
    estimate_tokens,
)
from core.providers.openai_chat import OpenAIChatProvider
from core.providers.scripted import ScriptedProvider

__all__ = [
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatProvider",
    "Provider",
    "ScriptedProvider",
    "ToolCall",
    "ToolSpec",
    "Transcription",
    "Usage",
    "estimate_tokens",
]

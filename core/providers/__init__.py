"""Model providers behind the ``Provider`` port.

The port and its value types (``base``) are pure; the adapters are imported on
first use, so that the engine, which depends on the port only, never pulls in an
HTTP client (the purity test imports ``core.engine`` alone and checks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatProvider":
        from core.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider
    if name == "ScriptedProvider":
        from core.providers.scripted import ScriptedProvider

        return ScriptedProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""read_session_history, transcribe_audio and finish."""

from __future__ import annotations

from typing import Any

from core.engine.tools.context import ToolContext
from core.engine.tools.registry import StagedEntry, ToolDefinition, ToolOutcome, obj
from core.errors import Forbidden, InvalidInput, NotFound, Unavailable

DEFAULT_HISTORY_CHARS = 8000


async def _read_history(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    target = args["session_id"]
    verdict = ctx.take_policy.can_take(ctx.session_id, target, ctx.state.turn.principal)
    if not verdict.ok:
        raise Forbidden(f"may not read session {target!r}: {verdict.reason or 'TAKE_UNKNOWN'}")
    if ctx.history_reader is None:
        raise Unavailable("no history reader is configured")
    text = await ctx.history_reader.read_history(target, int(args.get("limit_chars", DEFAULT_HISTORY_CHARS)))
    if text is None:
        raise NotFound(f"no history for session {target!r}")
    return ToolOutcome(ok=True, content=text)


def check_transcription_prompt(prompt: object) -> str:
    """KS-13: a string that is not blank after trimming, returned unchanged (no length cap)."""
    if not isinstance(prompt, str):
        raise InvalidInput("prompt must be a string")
    if not prompt.strip():
        raise InvalidInput("prompt must not be blank")
    return prompt


async def _transcribe(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    prompt = check_transcription_prompt(args.get("prompt"))
    resolved = await ctx.resolve_object(args["object_id"])
    if not resolved.media_type.startswith("audio/"):
        raise InvalidInput(f"object {resolved.object_id!r} is {resolved.media_type}, not audio")
    result = await ctx.provider.transcribe(
        resolved.data, resolved.media_type, prompt, model=ctx.state.runtime.model
    )
    return ToolOutcome(ok=True, content=result.text, usage=result.usage)


async def _finish(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    result = args.get("result", "")
    entry = StagedEntry("event", {"type": "finalized", "reason": "tool", "result": result})
    return ToolOutcome(ok=True, content="free time finished", entries=[entry])


READ_SESSION_HISTORY = ToolDefinition(
    name="read_session_history",
    description="Read another session's recent history, if the take rules allow it.",
    parameters=obj(
        {
            "session_id": {"type": "string", "minLength": 1},
            "limit_chars": {"type": "integer", "minimum": 1, "maximum": 200000},
        },
        ["session_id"],
    ),
    handler=_read_history,
    modes=frozenset({"conversation", "free_time", "ingress"}),
)

TRANSCRIBE_AUDIO = ToolDefinition(
    name="transcribe_audio",
    description="Transcribe an audio attachment or object; prompt guides the transcription.",
    parameters=obj({"object_id": {"type": "string", "minLength": 1}, "prompt": {"type": "string"}}, ["object_id", "prompt"]),
    handler=_transcribe,
)

FINISH = ToolDefinition(
    name="finish",
    description="End this free-time slice; result says what was done.",
    parameters=obj({"result": {"type": "string"}}, []),
    handler=_finish,
    modes=frozenset({"free_time"}),
)

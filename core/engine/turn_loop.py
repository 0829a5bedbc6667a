"""The provider loop of ``Session.run_pending_turn`` (KS-10).

model → tool calls → dispatch → results → model … until an answer, a finalize,
or the round limit. Every durable step is journaled, folded and checkpointed.

Resume rule: the loop always starts from the accepted state, so after a crash
the worker reopens the session from its last checkpoint (journal entries newer
than it are folded on open) and calls ``run_pending_turn`` again:

- a tool call with a journaled result is never dispatched again;
- a call the model asked for but whose dispatch was never journaled is dispatched;
- a call whose dispatch was journaled but whose result was not (the crash hit
  mid-tool) is re-dispatched only if the tool is marked ``idempotent``; otherwise
  it gets a durable failed result saying it was not re-run.
"""

from __future__ import annotations

import asyncio
import logging

from core.engine.chatend import memo_for, memo_messages
from core.engine.drafts import Checkpoint, Draft, interrupted_result
from core.engine.journal import EntryKind
from core.engine.ports import PartialText
from core.engine.recovery import recover_context
from core.engine.session_port import SessionPort
from core.engine.state import OpenCall
from core.engine.tools import ToolContext, ToolOutcome, validate_arguments
from core.errors import Conflict, ProviderError, TurnstileError
from core.providers.base import ModelRequest, ModelResponse, TextSink
from core.trusted_models import trusted

log = logging.getLogger(__name__)

# A tool result's content is kept to this many characters (the rest replaced by a marker saying how
# much was cut): every later snapshot of the session repeats it three times (transcript, projection,
# chatend text), and one the broker cannot store would leave no checkpoint possible for the session.
# Under a snapshot budget, at most a 24th of it (3 copies of up to 4 UTF-8 bytes a character, within
# the half a turn may add after compaction, recovery.py).
MAX_TOOL_RESULT_CHARS = 262_144
BUDGET_BYTES_PER_RESULT_CHAR = 24


def tool_result_limit(snapshot_max_bytes: int | None) -> int:
    """Characters of a tool result's content kept in the transcript."""
    if snapshot_max_bytes is None:
        return MAX_TOOL_RESULT_CHARS
    return max(min(MAX_TOOL_RESULT_CHARS, snapshot_max_bytes // BUDGET_BYTES_PER_RESULT_CHAR), 1)


def clip_content(content: str, limit: int) -> str:
    """``content``, or its first ``limit`` characters and a marker of how many more there were."""
    if len(content) <= limit:
        return content
    return f"{content[:limit]}\n[truncated: {len(content) - limit} more characters]"


class TurnExhausted(Conflict):
    """Raised when a turn used its round limit without an answer; the turn stays pending
    (``reset_exhausted_turn_rounds_for_retry`` + run again, or interrupt it)."""


async def run_turn(session: SessionPort, checkpoint: Checkpoint) -> str | None:
    """Drive the pending turn to its end; see the module docstring."""
    state = session.state
    if state.mode.is_conversation and state.source_terminated:
        await _end(session, checkpoint, "source_terminated")
        return None
    while True:
        session.raise_if_cancelled()
        if state.turn.phase == "tools" and state.turn.open_calls:
            await _resolve_open_calls(session, checkpoint)
            if not state.turn.pending:
                await _complete(session, checkpoint)
                return None
            continue
        if state.turn.phase == "answered":
            return await _finish_answered(session, checkpoint)
        if state.rounds_used >= state.max_rounds:
            if not state.exhausted:
                await session.commit([session.draft(EntryKind.EVENT, {"type": "rounds_exhausted"})], checkpoint)
            raise TurnExhausted(f"the turn used all {state.max_rounds} model rounds without an answer")
        await recover_context(session, checkpoint)
        response = await session.guarded(session.provider.complete(_request(session)))
        session.last_usage = session.last_usage + response.usage
        drafts = [session.draft(EntryKind.AGENT_MESSAGE, _response_payload(session, response))]
        if _final_reply(session, response):
            # A conversation's final answer and the end of its turn are one durable step:
            # journaled together, one checkpoint (transition ``turn_ended``) instead of two.
            drafts.append(session.draft(EntryKind.EVENT, {"type": "turn_ended", "outcome": "replied"}))
            await session.commit(drafts, checkpoint)
            return state.turn.answer or None
        await session.commit(drafts, checkpoint)


def _final_reply(session: SessionPort, response: ModelResponse) -> bool:
    """The response answers a conversation turn with something to deliver (no tool calls)."""
    state = session.state
    return state.mode.is_conversation and not response.tool_calls and bool(response.text or state.turn.outputs)


def _request(session: SessionPort) -> ModelRequest:
    # Built without validation: every field is already of its type (the memo's projected
    # messages, the registry's frozen specs), and validating ``messages`` walked and copied
    # the whole conversation again at every model round (O(transcript) per turn).
    state = session.state
    memo = memo_for(state.transcript)
    return trusted(ModelRequest, {
        "model": state.runtime.model,
        "reasoning_effort": state.runtime.reasoning_effort,
        "system_prompt": session.system_prompt,
        "messages": memo_messages(memo),
        "content_chars": memo.content_chars,
        "tools": session.tools.specs_for(state.mode.kind, has_work=state.work is not None),
        "purpose": "chat",
        "on_text": _round_text(session.partial_text, state.rounds_used + 1),
    })


def _round_text(watcher: PartialText | None, round_no: int) -> TextSink | None:
    """The provider's text sink for one model round: the watcher told which round it is."""
    if watcher is None:
        return None

    async def on_text(text: str) -> None:
        await watcher(round_no, text)

    return on_text


def _response_payload(session: SessionPort, response: ModelResponse) -> dict[str, object]:
    seen: set[str] = set()
    for call in response.tool_calls:
        if call.id in seen:
            raise ProviderError(f"model returned tool call id {call.id!r} twice")
        seen.add(call.id)
    return {
        "text": response.text,
        "tool_calls": [c.model_dump(mode="json") for c in response.tool_calls],
        "usage": response.usage.model_dump(),
        "round": session.state.rounds_used + 1,
    }


async def _resolve_open_calls(session: SessionPort, checkpoint: Checkpoint) -> None:
    state = session.state
    for call in list(state.turn.open_calls):
        if not state.turn.pending:
            return
        session.raise_if_cancelled()
        tool = session.tools.get(call.name)
        if call.dispatched and not (tool is not None and tool.idempotent):
            why = "the worker stopped while this tool ran; it was not re-run and its effect is unknown"
            await session.commit([session.draft(EntryKind.TOOL_RESULT, interrupted_result(call.id, call.name, why))], checkpoint)
            continue
        if not call.dispatched:
            marker = {"id": call.id, "name": call.name, "arguments": call.arguments}
            await session.commit([session.draft(EntryKind.TOOL_CALL, marker)], checkpoint)
        outcome = await session.guarded(_dispatch(session, call))
        session.last_usage = session.last_usage + outcome.usage
        await session.commit(_result_drafts(session, call, outcome), checkpoint)


def _result_drafts(session: SessionPort, call: OpenCall, outcome: ToolOutcome) -> list[Draft]:
    content = clip_content(outcome.content, tool_result_limit(session.snapshot_max_bytes))
    if len(content) != len(outcome.content):
        log.warning("tool %s of session %s returned %d characters; %d kept", call.name, session.session_id,
                    len(outcome.content), len(content))
    result = {
        "id": call.id, "name": call.name, "ok": outcome.ok, "content": content,
        "interrupted": False, "usage": outcome.usage.model_dump(),
    }
    drafts = [session.draft(EntryKind.TOOL_RESULT, result)]
    ends_turn = any(e.kind == "event" and e.payload.get("type") == "finalized" for e in outcome.entries)
    if ends_turn:
        # The turn ends with this result: the other calls of the round must not stay orphaned.
        for other in session.state.turn.open_calls:
            if other.id != call.id:
                payload = interrupted_result(other.id, other.name, "the slice finished first")
                drafts.append(session.draft(EntryKind.TOOL_RESULT, payload))
    drafts.extend(session.draft(e.kind, e.payload) for e in outcome.entries)
    return drafts


async def _dispatch(session: SessionPort, call: OpenCall) -> ToolOutcome:
    state = session.state
    try:
        tool = session.tools.authorise(call.name, state.mode.kind)
        if tool.check_arguments is not None:
            tool.check_arguments(call.arguments)
        else:
            validate_arguments(tool.parameters, call.arguments)
        context = ToolContext(
            session_id=state.session_id, state=state, provider=session.provider,
            knowledge=session.knowledge, take_policy=session.take_policy,
            history_reader=session.history_reader, leases=session.leases, clock=session.clock,
            resolve_object=session.resolve_object, new_id=session.new_id,
        )
        limit = asyncio.timeout(tool.timeout_s)
        try:
            async with limit:
                return await tool.handler(context, call.arguments)
        except TimeoutError:
            if not limit.expired():
                raise  # the tool's own TimeoutError: a tool failure like any other
            # An interrupt or a deletion stays a cancellation; only the limit ends up here.
            log.warning("tool %s of session %s ran over its %s s limit", call.name, state.session_id, tool.timeout_s)
            why = f"tool {call.name!r} did not finish within {tool.timeout_s} s; its effect is unknown"
            return ToolOutcome(ok=False, content=f"error (timeout): {why}")
    except TurnstileError as exc:
        return ToolOutcome(ok=False, content=f"error ({exc.code}): {exc.message}")
    except Exception as exc:  # a broken tool must not kill the turn; the model sees the failure
        log.exception("tool %s failed in session %s", call.name, state.session_id)
        return ToolOutcome(ok=False, content=f"error (internal): {type(exc).__name__}: {exc}")


async def _end(session: SessionPort, checkpoint: Checkpoint, outcome: str, error: str = "") -> None:
    payload = {"type": "turn_ended", "outcome": outcome}
    if error:
        payload["error"] = error[:200]
    await session.commit([session.draft(EntryKind.EVENT, payload)], checkpoint)


async def _finish_answered(session: SessionPort, checkpoint: Checkpoint) -> str | None:
    state = session.state
    answer = state.turn.answer or ""
    has_outputs = bool(state.turn.outputs)
    if state.mode.is_conversation:
        if answer or has_outputs:
            await _end(session, checkpoint, "replied")
            return answer or None
        message = "the conversation turn ended without any response"
        await _end(session, checkpoint, "error", message)
        raise ProviderError(message)
    await _end(session, checkpoint, "replied" if has_outputs else "silent")
    await _complete(session, checkpoint)
    return None


async def _complete(session: SessionPort, checkpoint: Checkpoint) -> None:
    """Non-conversation modes finalize and commit their own write session (KS-3)."""
    state = session.state
    if state.mode.is_conversation:
        return None
    if state.mode.kind == "free_time" and state.free_time_result is None:
        # The model ended the slice by answering instead of calling finish: same as finish.
        payload = {"type": "finalized", "reason": "tool", "result": state.turn.answer or "", "implicit": True}
        await session.commit([session.draft(EntryKind.EVENT, payload, in_turn=False)], checkpoint)
    await session.commit_current_write_session(checkpoint=checkpoint)
    return None

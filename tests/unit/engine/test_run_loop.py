"""run_pending_turn: provider loop, checkpoints, returns, cancellation, resume (KS-10, KS-2, KS-3)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from core.engine import AgentMode, RuntimeModel, SessionOptions, ToolDefinition, builtin_registry
from core.engine.tools import ToolOutcome
from core.errors import Cancelled, CheckpointFailed, ProviderError
from core.providers import ModelRequest, ModelResponse, ScriptedProvider
from tests.waiting import wait_for

from .conftest import PROMPT, Recorder, SessionFactory


class CountingTool:
    """A custom tool that counts how often it really ran."""

    def __init__(self, idempotent: bool) -> None:
        self.runs = 0
        self.definition = ToolDefinition(
            name="count", description="count", handler=self._handle, idempotent=idempotent,
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
        )

    async def _handle(self, ctx: Any, args: dict[str, Any]) -> ToolOutcome:
        self.runs += 1
        return ToolOutcome(ok=True, content=f"run {self.runs}")


class RecordingProvider(ScriptedProvider):
    """Scripted provider that keeps every request it saw."""

    def __init__(self) -> None:
        super().__init__(directives=True)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await super().complete(request)


@pytest.mark.rule("KS-10")
async def test_nothing_pending_returns_none(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    recorder = Recorder()
    assert await session.run_pending_turn("op", recorder) is None
    assert recorder.snapshots == []


@pytest.mark.rule("KS-10")
async def test_tool_loop_checkpoints_after_every_durable_transition(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn('weather?\n/tool knowledge_search {"query": "rain"}\n/say sunny')
    recorder = Recorder()
    assert await session.run_pending_turn("op", recorder) == "sunny"
    # The final answer and the turn's end are one durable step (one journal write, one checkpoint).
    assert recorder.last_entry_kinds() == ["agent_message", "tool_call", "tool_result", "event:turn_ended"]
    final = recorder.snapshots[-1]["transcript"][-1]
    assert final["kind"] == "agent_message" and final["payload"]["text"] == "sunny"
    versions = [s["state_version"] for s in recorder.snapshots]
    assert versions == sorted(set(versions)), "every checkpoint is a new state"
    assert recorder.snapshots[-1] == session.snapshot()


@pytest.mark.rule("KS-10")
async def test_checkpoint_failure_aborts_the_run(make_session: SessionFactory) -> None:
    # KS-10
    tool = CountingTool(idempotent=True)
    session = await make_session(tools=builtin_registry([tool.definition]))
    await session.begin_user_turn("/tool count\n/say ok")
    with pytest.raises(CheckpointFailed):
        await session.run_pending_turn("op", Recorder(fail_at=0))
    assert tool.runs == 0, "nothing after the failed checkpoint ran"
    assert session.pending_turn


@pytest.mark.rule("KS-10")
async def test_reply_tool_response_returns_none(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn('/tool reply {"text": "here you go"}\n/say')
    assert await session.run_pending_turn("op", Recorder()) is None
    assert [o.text for o in session.turn_outputs] == ["here you go"]
    assert session.state.last_turn.outcome == "replied"


@pytest.mark.rule("KS-10")
async def test_conversation_without_any_response_is_an_error(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn("/say")
    with pytest.raises(ProviderError):
        await session.run_pending_turn("op", Recorder())
    assert session.state.last_turn.outcome == "error"
    assert not session.pending_turn


@pytest.mark.rule("KS-10")
async def test_terminated_source_returns_none(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn("hello")
    await session.append_final_user_message("goodbye")
    assert await session.run_pending_turn("op", Recorder()) is None
    assert session.state.last_turn.outcome == "source_terminated"


@pytest.mark.rule("KS-10")
async def test_cancel_reaches_the_provider_call(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn("/stall 60")
    run = asyncio.create_task(session.run_pending_turn("op-7", Recorder()))
    await wait_for(lambda: session._inflight is not None, timeout_s=5, interval_s=0, what="the model call")
    assert session.cancel("op-7") is True
    with pytest.raises(Cancelled):
        await run
    assert session.pending_turn and not session.running


async def test_usage_of_the_run_is_reported(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn('/tool knowledge_search {"query": "x"}\n/usage 10 3')
    await session.run_pending_turn("op", Recorder())
    assert (session.last_usage.input_tokens, session.last_usage.output_tokens) == (20, 6)
    assert session.usage_total == session.last_usage


async def test_provider_failure_keeps_turn_pending(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn("/fail upstream 503")
    with pytest.raises(ProviderError, match="upstream 503"):
        await session.run_pending_turn("op", Recorder())
    assert session.pending_turn


@pytest.mark.rule("KS-10")
@pytest.mark.parametrize("idempotent", [True, False])
async def test_resume_never_reruns_a_journaled_tool(
    make_session: SessionFactory, journal: Any, idempotent: bool
) -> None:
    # KS-10: crash after each checkpoint; reopen from it and finish; count real tool runs
    tool = CountingTool(idempotent=idempotent)
    tools = builtin_registry([tool.definition])
    first = await make_session(tools=tools)
    await first.begin_user_turn("/tool count\n/tool count\n/say done")
    full = Recorder()
    assert await first.run_pending_turn("op", full) == "done"
    assert tool.runs == 2
    for crash_at in range(len(full.snapshots)):
        tool.runs = 0
        crashed = Recorder(fail_at=crash_at + 1)
        session = await make_session(tools=tools, session_id=f"resume-{idempotent}-{crash_at}")
        await session.begin_user_turn("/tool count\n/tool count\n/say done")
        with contextlib.suppress(CheckpointFailed):
            await session.run_pending_turn("op", crashed)
        entries = await journal.load(session.session_id)
        journaled_results = sum(1 for e in entries if e.kind.value == "tool_result")
        tool.runs = 0
        resumed = await make_session(
            tools=tools, session_id=session.session_id, restored=crashed.snapshots[-1]
        )
        answer = await resumed.run_pending_turn("op-2", Recorder())
        assert answer == "done" or (answer is None and resumed.state.last_turn.outcome == "replied")
        assert [o.text for o in resumed.turn_outputs] == ["done"]
        results = [i for i in resumed.transcript if i["kind"] == "tool_result"]
        assert len(results) == 2
        interrupted = [r for r in results if r["payload"]["interrupted"]]
        # a journaled result is never produced again; only the missing ones are run (or,
        # for a non-idempotent tool cut off mid-run, closed as "not re-run")
        assert tool.runs + len(interrupted) == 2 - journaled_results
        if idempotent:
            assert not interrupted


@pytest.mark.rule("KS-10")
async def test_resume_after_crash_between_journal_and_checkpoint(make_session: SessionFactory) -> None:
    # KS-10: the journal is ahead of the last checkpoint; the result journaled is not re-run
    tool = CountingTool(idempotent=False)
    tools = builtin_registry([tool.definition])
    session = await make_session(tools=tools)
    await session.begin_user_turn("/tool count\n/say done")
    recorder = Recorder(fail_at=2)  # model response ok, call marker ok, result checkpoint fails
    with pytest.raises(CheckpointFailed):
        await session.run_pending_turn("op", recorder)
    assert tool.runs == 1
    resumed = await make_session(tools=tools, restored=recorder.snapshots[-1])
    assert await resumed.run_pending_turn("op-2", Recorder()) == "done"
    assert tool.runs == 1
    result = next(i for i in resumed.transcript if i["kind"] == "tool_result")
    assert result["payload"]["content"] == "run 1"


@pytest.mark.rule("KS-2")
async def test_open_reopens_the_journal_and_uses_runtime_mechanically(make_session: SessionFactory) -> None:
    # KS-2
    provider = RecordingProvider()
    session = await make_session(provider=provider)
    await session.begin_user_turn("hello")
    await session.run_pending_turn("op", Recorder())
    request = provider.requests[-1]
    assert (request.model, request.reasoning_effort, request.system_prompt) == ("test-model", "low", PROMPT)
    reopened = await make_session()
    assert reopened.snapshot() == session.snapshot()


async def test_open_requires_a_complete_system_prompt(make_session: SessionFactory) -> None:
    # KS-2
    from core.errors import InvalidInput

    with pytest.raises(InvalidInput):
        await make_session(system_prompt="")


@pytest.mark.rule("KS-3")
async def test_conversation_stays_open_after_its_turn(make_session: SessionFactory) -> None:
    # KS-3
    session = await make_session()
    await session.begin_user_turn("hi")
    assert await session.run_pending_turn("op", Recorder()) == "echo: hi"
    assert not session.completed and session.status == "idle"


@pytest.mark.rule("KS-3")
@pytest.mark.parametrize("mode", ["free_time", "wakeup"])
async def test_non_conversation_modes_complete_after_their_turn(make_session: SessionFactory, mode: str) -> None:
    # KS-3
    channel = {"wakeup_marker": "2025-06-01T08:00:00Z"} if mode == "wakeup" else {}
    options = SessionOptions.conversation("agent", ["root"]).with_changes(mode=AgentMode(kind=mode), channel=channel)
    session = await make_session(options=options)
    opened = await (session.stage_free_time_opening() if mode == "free_time" else session.stage_wakeup_opening())
    assert opened
    recorder = Recorder()
    assert await session.run_pending_turn("op", recorder) is None
    assert session.completed and session.status == "completed"
    assert recorder.snapshots[-1]["commit"] is not None


@pytest.mark.rule("KS-1")
def test_conversation_options_normalise_roots() -> None:
    # KS-1
    options = SessionOptions.conversation("im-dm", ["w2", "w1", "w2"])
    assert options.mode.kind == "conversation"
    assert options.root_node_ids == ["w2", "w1"]
    changed = options.with_changes(reference_root_node_ids=["r9", "w1", "r1", "r9"])
    assert changed.reference_root_node_ids == ["r1", "r9"]
    assert changed.root_node_ids == ["w2", "w1"]
    assert RuntimeModel(model="m", context_window_tokens=1).model == "m"


@pytest.mark.rule("KS-10")
async def test_cancel_before_the_run_starts_cancels_it(make_session: SessionFactory) -> None:
    # KS-10
    session = await make_session()
    await session.begin_user_turn("hello")
    assert session.cancel("op-early") is False
    with pytest.raises(Cancelled):
        await session.run_pending_turn("op-early", Recorder())
    assert session.pending_turn
    assert await session.run_pending_turn("op-next", Recorder()) == "echo: hello"

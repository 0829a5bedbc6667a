"""The per-session worker over a real nats-server: checkpoints per transition, interrupts,
mid-turn policies, round limit, provider errors, replayed events, token usage."""

from __future__ import annotations

import uuid

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import (
    WAIT_FOREVER,
    event_types,
    events_of,
    last_snapshot,
    results_by_call,
    transitions,
)

CHAT = {"type": "private", "target_id": "u1", "multi_party": False}


def _sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _watch(nc: Client, subjects: Subjects, sid: str) -> tuple[Collector, Collector, Collector]:
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    return replies, checkpoints, events


def _ended(events: Collector) -> list[dict[str, object]]:
    return [e["data"] for e in events_of(events, "turn.ended")]


@pytest.mark.rule("KS-10", "MQ-3", "SM-15")
async def test_a_tool_calling_turn_publishes_one_checkpoint_per_transition(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("tools")
    replies, checkpoints, events = await _watch(nc, subjects, sid)
    script = '/usage 5 2\n/tool reply {"text": "first"}\n/tool+ knowledge_search {"query": "x"}\n/say done'
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: _ended(events), what="turn.ended")
    # KS-10: a complete snapshot after every durable semantic transition, in order.
    assert transitions(checkpoints) == [
        "message_staged", "model_response", "tool_call", "tool_result", "tool_call", "tool_result",
        "turn_ended",  # the final answer and the turn's end are one durable step
    ]
    versions = [cp["state_version"] for cp in checkpoints.json()]
    assert versions == sorted(set(versions))
    assert all(cp["snapshot"]["state_version"] == cp["state_version"] for cp in checkpoints.json())
    await wait_for(lambda: len(replies.messages) >= 2, what="two replies")
    assert [r["text"] for r in replies.json()] == ["first", "done"]
    # SM-15: the session's own usage (two rounds of 5/2) is visible on the record.
    got = await api(nc, subjects, "session", "get", {"session_id": sid})
    assert got["result"]["tokens"] == {"input": 10, "output": 4}
    assert events_of(events, "usage")[-1]["data"] == {"input": 10, "output": 4}


@pytest.mark.rule("KS-8", "KS-10")
async def test_interrupting_a_stalled_tool_call_leaves_no_orphaned_call(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    assert service.engines is not None
    service.engines.tools.register(WAIT_FOREVER)
    sid = _sid("intr")
    replies, checkpoints, events = await _watch(nc, subjects, sid)
    await publish_inbound(nc, subjects, inbound(sid, "/tool wait_forever {}", chat=CHAT))
    await wait_for(lambda: "tool_call" in transitions(checkpoints), what="the tool dispatch checkpoint")

    stopped = await api(nc, subjects, "session", "interrupt", {"session_id": sid})
    assert stopped["ok"], stopped
    assert stopped["result"]["interrupted"] and stopped["result"]["stopped_running"]
    assert stopped["result"]["status"] == "idle"
    await wait_for(lambda: _ended(events), what="turn.ended")
    assert _ended(events)[0]["outcome"] == "aborted"
    # KS-8: the final checkpoint has a durable interrupted result for the call, a user-stop notice, idle.
    assert transitions(checkpoints)[-1] == "interrupted"
    snap = last_snapshot(checkpoints)
    by_call = results_by_call(snap["transcript"])
    assert len(by_call) == 1
    [(_call_id, results)] = by_call.items()
    assert len(results) == 1 and results[0]["interrupted"] is True
    assert any(i["kind"] == "notice" and i["payload"]["code"] == "user_stop" for i in snap["transcript"])
    assert snap["turn"]["open_calls"] == [] and snap["status"] == "idle"
    assert snap["orchestration"]["state"] == "idle"
    got = await api(nc, subjects, "session", "get", {"session_id": sid})
    assert got["result"]["last_turn"]["outcome"] == "aborted"
    # The session goes on normally.
    await publish_inbound(nc, subjects, inbound(sid, "after"))
    await wait_for(lambda: replies.messages, what="the next reply")
    assert replies.json()[0]["text"] == "echo: after"


async def test_interrupt_refuses_an_unknown_session_and_a_bad_request(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    missing = await api(nc, subjects, "session", "interrupt", {"session_id": _sid("nobody")})
    assert missing == {"ok": False, "error": {"code": "not_found", "message": missing["error"]["message"]}}
    bad = await api(nc, subjects, "session", "interrupt", {"session": "x"})
    assert not bad["ok"] and bad["error"]["code"] == "invalid"


@pytest.mark.rule("MQ-2")
async def test_enqueue_policy_answers_a_mid_turn_message_after_the_running_turn(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("enq")
    replies, _, events = await _watch(nc, subjects, sid)
    await publish_inbound(nc, subjects, inbound(sid, "/stall 1\nA"))
    await wait_for(lambda: "turn.started" in event_types(events), what="the first turn")
    await publish_inbound(nc, subjects, inbound(sid, "B"))
    await wait_for(lambda: len(_ended(events)) >= 2, what="both turns ended")
    assert [r["text"] for r in replies.json()] == ["echo: A", "echo: B"]
    assert [d["outcome"] for d in _ended(events)] == ["replied", "replied"]


@pytest.mark.rule("KS-8")
async def test_interrupt_policy_stops_the_running_turn_and_serves_the_new_message(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("ipol")
    await service.manager.ensure_session(sid, {"metadata": {"mid_turn_policy": "interrupt"}})
    replies, checkpoints, events = await _watch(nc, subjects, sid)
    await publish_inbound(nc, subjects, inbound(sid, "/stall 30\nA"))
    await wait_for(lambda: "turn.started" in event_types(events), what="the first turn")
    await publish_inbound(nc, subjects, inbound(sid, "B"))
    await wait_for(lambda: len(_ended(events)) >= 2, what="both turns ended")
    assert [d["outcome"] for d in _ended(events)] == ["aborted", "replied"]
    assert [r["text"] for r in replies.json()] == ["echo: B"]
    assert "interrupted" in transitions(checkpoints)


async def test_reject_policy_drops_a_mid_turn_message_as_busy(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("rpol")
    await service.manager.ensure_session(sid, {"metadata": {"mid_turn_policy": "reject"}})
    replies, _, events = await _watch(nc, subjects, sid)
    await publish_inbound(nc, subjects, inbound(sid, "/stall 30\nA"))
    await wait_for(lambda: "turn.started" in event_types(events), what="the first turn")
    second = inbound(sid, "B")
    await publish_inbound(nc, subjects, second)
    await wait_for(lambda: events_of(events, "message.dropped"), what="the rejected message")
    dropped = events_of(events, "message.dropped")[0]["data"]
    assert dropped["inbound_id"] == second["id"] and dropped["reason"] == "busy"
    stopped = await api(nc, subjects, "session", "interrupt", {"session_id": sid})
    assert stopped["result"]["interrupted"]
    third = inbound(sid, "C")
    await publish_inbound(nc, subjects, third)
    await wait_for(lambda: replies.messages, what="a reply to the next message")
    assert [r["text"] for r in replies.json()] == ["echo: C"]


@pytest.mark.rule("KS-10", "SM-14")
async def test_a_turn_that_uses_its_round_limit_ends_in_error_and_the_next_message_is_served(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("exh")
    replies, checkpoints, events = await _watch(nc, subjects, sid)
    script = "\n".join(['/tool knowledge_search {"query": "q"}'] * 16)
    await publish_inbound(nc, subjects, inbound(sid, script, chat=CHAT))
    await wait_for(lambda: _ended(events), what="turn.ended")
    ended = _ended(events)[0]
    assert ended["outcome"] == "error" and str(ended["error"]).startswith("rounds_exhausted:")
    assert ended["status"] == "exhausted"
    # Documented state: the turn stays pending and exhausted in the checkpoint; nothing was delivered.
    assert transitions(checkpoints)[-1] == "rounds_exhausted"
    assert last_snapshot(checkpoints)["status"] == "exhausted"
    assert not replies.messages
    got = await api(nc, subjects, "session", "get", {"session_id": sid})
    assert got["result"]["last_turn"]["outcome"] == "error"
    assert got["result"]["last_turn"]["error"].startswith("rounds_exhausted:")
    await publish_inbound(nc, subjects, inbound(sid, "next"))
    await wait_for(lambda: replies.messages, what="the next reply")
    assert replies.json()[0]["text"] == "echo: next"


async def test_a_provider_error_ends_the_turn_in_error_and_keeps_the_message(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("perr")
    replies, checkpoints, events = await _watch(nc, subjects, sid)
    failing = inbound(sid, "/fail model overloaded")
    await publish_inbound(nc, subjects, failing)
    await wait_for(lambda: _ended(events), what="turn.ended")
    ended = _ended(events)[0]
    assert ended["outcome"] == "error" and "model overloaded" in str(ended["error"])
    assert not replies.messages
    await publish_inbound(nc, subjects, inbound(sid, "still there?"))
    await wait_for(lambda: replies.messages, what="the next reply")
    assert replies.json()[0]["text"] == "echo: still there?"
    # The failed message is not lost: it stays in the transcript, before the repair of its turn.
    staged = [i for i in last_snapshot(checkpoints)["transcript"] if i["kind"] == "user_message"]
    assert staged[0]["payload"]["inbound_id"] == failing["id"]


@pytest.mark.rule("KS-14")
async def test_a_replayed_external_event_is_never_answered_twice(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("ev")
    replies, _, events = await _watch(nc, subjects, sid)
    event_id = f"ev-{uuid.uuid4().hex[:6]}"
    await publish_inbound(nc, subjects, inbound(sid, "hello", external_event_id=event_id))
    await wait_for(lambda: replies.messages, what="the answer")
    replay = inbound(sid, "hello", external_event_id=event_id)  # same platform event, new message id
    await publish_inbound(nc, subjects, replay)
    await wait_for(lambda: events_of(events, "message.dropped"), what="the replay dropped")
    dropped = events_of(events, "message.dropped")[0]["data"]
    assert dropped["inbound_id"] == replay["id"] and dropped["reason"] == "duplicate"
    js = nc.jetstream()
    info = await js.stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == 1
    assert [r["external_event_id"] for r in replies.json()] == [event_id]
    assert len(events_of(events, "turn.started")) == 1


@pytest.mark.rule("KS-11")
async def test_object_resolve_returns_an_attachment_exactly(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    import base64

    sid = _sid("obj")
    replies, _, _ = await _watch(nc, subjects, sid)
    data = bytes(range(256)) * 3
    object_id = f"att-{uuid.uuid4().hex[:8]}"
    attachment = {"id": object_id, "file_name": "blob.bin", "media_type": "image/png",
                  "data_base64": base64.b64encode(data).decode()}
    await publish_inbound(nc, subjects, inbound(sid, "see attached", attachments=[attachment]))
    await wait_for(lambda: replies.messages, what="the answer")
    got = await api(nc, subjects, "object", "resolve", {"session_id": sid, "object_id": object_id})
    assert got["ok"], got
    result = got["result"]
    assert base64.b64decode(result["data_base64"]) == data
    assert (result["file_name"], result["media_type"], result["transport_kind"], result["size"]) == (
        "blob.bin", "image/png", "photo", len(data))
    missing = await api(nc, subjects, "object", "resolve", {"session_id": sid, "object_id": "nope"})
    assert missing["error"]["code"] == "not_found"


@pytest.mark.rule("KS-15")
async def test_group_context_arrives_by_control_op_and_is_applied_only_in_groups(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("grp")
    replies, checkpoints, _ = await _watch(nc, subjects, sid)
    group = {"type": "group", "target_id": "g1", "multi_party": True, "name": "team"}
    await publish_inbound(nc, subjects, inbound(sid, "hi all", chat=group))
    await wait_for(lambda: replies.messages, what="the answer")
    context = {"topic": "release", "members": ["ann", "bob"]}
    got = await api(nc, subjects, "session", "group_context",
                    {"session_id": sid, "context": context, "current_message_id": "m9"})
    assert got == {"ok": True, "result": {"session_id": sid, "applied": True}}
    assert transitions(checkpoints)[-1] == "group_context"
    snap = last_snapshot(checkpoints)
    assert snap["group_context"] == context
    assert snap["boxes"][-1]["current_message_id"] == "m9"
    assert sum(1 for i in snap["transcript"] if i["kind"] == "box") == 1

    dm = _sid("dm")
    dm_replies = await Collector().attach(nc, subjects.outbound("cli", dm))
    await publish_inbound(nc, subjects, inbound(dm, "hi", chat=CHAT))
    await wait_for(lambda: dm_replies.messages, what="the dm answer")
    noop = await api(nc, subjects, "session", "group_context", {"session_id": dm, "context": context})
    assert noop["ok"] and noop["result"]["applied"] is False
    assert orjson.dumps(noop)  # a plain JSON reply


@pytest.mark.rule("KS-9")
async def test_an_exhausted_turn_is_retried_over_the_api_and_answers(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # KS-9: turn.retry resets only an exhausted ordinary conversation, then runs the turn again.
    sid = _sid("retry")
    replies, _checkpoints, events = await _watch(nc, subjects, sid)
    script = "\n".join(['/tool knowledge_search {"query": "q"}'] * 16 + ["/say done after retry"])
    message = inbound(sid, script, chat=CHAT)
    await publish_inbound(nc, subjects, message)
    await wait_for(lambda: _ended(events), what="the exhausted turn")
    assert _ended(events)[0]["status"] == "exhausted"
    retried = await api(nc, subjects, "turn", "retry", {"session_id": sid, "platform": "cli", "reply_to": message["id"]})
    assert retried["ok"], retried
    assert retried["result"]["outcome"] == "replied" and retried["result"]["delivered"] == 1
    await wait_for(lambda: replies.messages, what="the retried answer")
    assert replies.json()[0]["text"] == "done after retry" and replies.json()[0]["reply_to"] == message["id"]
    again = await api(nc, subjects, "turn", "retry", {"session_id": sid})
    assert again["ok"] is False and again["error"]["code"] == "conflict"
    unknown = await api(nc, subjects, "turn", "retry", {"session_id": _sid("nobody")})
    assert unknown["ok"] is False and unknown["error"]["code"] == "not_found"

"""The ``turnstile`` CLI as a real subprocess against a real nats-server and service."""

from __future__ import annotations

import uuid

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.events import parse_event
from schemas.subjects import Subjects
from tests.integration.cli_process import Live, global_args, turnstile
from tests.integration.harness import api, inbound, publish_inbound

pytestmark = pytest.mark.integration


def _sid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


async def test_send_prints_every_output_of_the_turn(service: TurnstileService, settings: Settings) -> None:
    sid = _sid("send")
    ran = await turnstile("send", "--session", sid, '/tool reply {"text": "one"}\n/say two', settings=settings)
    assert ran.code == 0, ran.stderr
    assert ran.lines == ["one", "two"]


async def test_send_prints_the_error_of_a_failed_turn(service: TurnstileService, settings: Settings) -> None:
    sid = _sid("fail")
    ran = await turnstile("send", "--session", sid, "/fail boom", settings=settings)
    assert ran.code == 1
    line = _one_error_line(ran.stderr)
    assert line.startswith("turnstile: turn failed:") and "boom" in line
    assert ran.stdout == ""


async def test_send_json_prints_the_replies_then_turn_ended(service: TurnstileService, settings: Settings) -> None:
    sid = _sid("json")
    ran = await turnstile("--json", "send", "-s", sid, '/tool reply {"text": "a"}\n/say b', settings=settings)
    assert ran.code == 0, ran.stderr
    objects = [orjson.loads(line) for line in ran.lines]
    assert [o["text"] for o in objects[:-1]] == ["a", "b"]
    assert [o["seq"] for o in objects[:-1]] == sorted(o["seq"] for o in objects[:-1])
    assert objects[-1]["type"] == "turn.ended" and objects[-1]["data"]["outcome"] == "replied"


async def test_sessions_shows_the_tree_with_labels_and_status(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    root = _sid("root")
    assert (await turnstile("send", "-s", root, "hi", settings=settings)).code == 0
    child = await api(nc, subjects, "session", "create_child", {"parent_id": root, "fields": {"title": "sub task"}})
    assert child["ok"], child
    child_id = child["result"]["id"]
    await api(nc, subjects, "session", "complete", {"session_id": child_id, "result": "done"})
    ran = await turnstile("sessions", settings=settings)
    assert ran.code == 0, ran.stderr
    root_line = next(line for line in ran.lines if line.startswith(root))
    child_line = next(line for line in ran.lines if child_id in line)
    as_json = {s["id"]: s for s in orjson.loads((await turnstile("--json", "sessions", settings=settings)).stdout)}
    root_record, child_record = as_json[root], as_json[child_id]
    assert root_line == f"{root}  [{root_record['status']}]  {root_record['label']['en']}"
    assert child_record["status"] == "completed" and child_record["parent_id"] == root
    assert child_line.startswith(f"  {child_id}  [completed]  ") and "sub task" in child_line
    assert ran.lines.index(child_line) == ran.lines.index(root_line) + 1


async def test_show_prints_record_place_tokens_and_transcript(service: TurnstileService, settings: Settings) -> None:
    sid = _sid("show")
    assert (await turnstile("send", "-s", sid, "hello there", settings=settings)).code == 0
    ran = await turnstile("show", sid, settings=settings)
    assert ran.code == 0, ran.stderr
    text = ran.stdout
    assert f"session     {sid}" in text and "place       workspace workspace:default" in text
    assert "last turn" in text and "outcome=replied" in text
    assert "tokens      input" in text
    assert "user: hello there" in text and "assistant: echo: hello there" in text
    shown = orjson.loads((await turnstile("--json", "show", sid, settings=settings)).stdout)
    assert shown["session"]["id"] == sid and shown["checkpoint"]["snapshot"]["session_id"] == sid
    missing = await turnstile("show", _sid("nobody"), settings=settings)
    assert missing.code == 2 and "not_found" in _one_error_line(missing.stderr)


async def test_tail_follows_events_and_replies_live(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("tail")
    tail = await Live.start("-m", "consumers.cli", *global_args(settings), "tail", sid)
    try:
        await tail.wait_line("following", stream="stderr")
        await publish_inbound(nc, subjects, inbound(sid, "/say watched"))
        await tail.wait_line("reply #")
        ended = await tail.wait_line("turn.ended")
    finally:
        code = await tail.stop()
    assert code == 0
    reply = next(line for line in tail.stdout if "reply #" in line)
    assert f"{sid} reply #" in reply and "→ cli: watched" in reply
    assert "outcome=replied" in ended[0]
    assert any("turn.started" in line for line in tail.stdout)
    assert "Traceback" not in "\n".join(tail.stderr)


async def test_emitted_events_match_their_typed_data(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    """The event data models describe what the service really emits (no undeclared field)."""
    sid = _sid("typed")
    tail = await Live.start("-m", "consumers.cli", *global_args(settings), "--json", "tail", sid)
    try:
        await tail.wait_line("following", stream="stderr")
        await publish_inbound(nc, subjects, inbound(sid, '/tool reply {"text": "x"}\n/usage 5 7\n/say y'))
        await tail.wait_line('"turn.ended"')
        await api(nc, subjects, "session", "delete", {"session_id": sid})
        await tail.wait_line('"session.deleted"')
    finally:
        await tail.stop()
    events = [o["data"] for o in map(orjson.loads, tail.stdout) if ".events." in o["subject"]]
    seen = set()
    for raw in events:
        event = parse_event(raw)
        assert not event.data.model_extra, (raw["type"], event.data.model_extra)  # type: ignore[attr-defined]
        seen.add(raw["type"])
    assert {"session.created", "turn.started", "usage", "turn.ended", "session.deleted"} <= seen


async def test_replay_follow_prints_history_then_what_arrives(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("replay")
    assert (await turnstile("send", "-s", sid, "first", settings=settings)).code == 0
    replay = await Live.start("-m", "consumers.cli", *global_args(settings), "replay", "events", "-s", sid, "--follow")
    try:
        await replay.wait_line('"turn.ended"')
        await publish_inbound(nc, subjects, inbound(sid, "second"))
        await replay.wait_line('"turn.ended"', count=2)
    finally:
        code = await replay.stop()
    assert code == 0
    seqs = [orjson.loads(line)["seq"] for line in replay.stdout]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    done = await turnstile("replay", "events", "-s", sid, "--since", "1h", settings=settings)
    assert done.code == 0  # without --follow it ends (bookkeeping events may have landed since)
    assert [orjson.loads(line)["seq"] for line in done.lines][: len(seqs)] == seqs
    for later in ("2100-01-01T00:00", "2999-01-01"):  # naive = UTC; past year 2262 the server starts at the first
        future = await turnstile("replay", "events", "-s", sid, "--since", later, settings=settings)
        assert future.code == 0 and future.lines == []


async def test_api_calls_and_refusals_are_one_line(service: TurnstileService, settings: Settings) -> None:
    sid = _sid("api")
    assert (await turnstile("send", "-s", sid, "hi", settings=settings)).code == 0
    got = await turnstile("api", "session.get", orjson.dumps({"session_id": sid}).decode(), settings=settings)
    assert got.code == 0 and orjson.loads(got.stdout)["result"]["id"] == sid
    refused = await turnstile("api", "session.get", '{"session_id": "x", "bogus": 1}', settings=settings)
    assert refused.code == 2 and "invalid" in _one_error_line(refused.stderr)
    unknown = await turnstile("api", "nope.nothing", settings=settings)
    assert unknown.code == 2 and "unknown operation 'nope.nothing'" in _one_error_line(unknown.stderr)


async def test_errors_without_a_service_are_one_line(nats_server: object, settings: Settings) -> None:
    no_service = await turnstile("api", "session.list", settings=settings, timeout_s=30)
    assert no_service.code == 1 and "no turnstile service answers" in _one_error_line(no_service.stderr)
    # No service ever set the prefix up: the inbound publish finds no stream, said in one line at once.
    no_stream = await turnstile("send", "-s", _sid("nostream"), "hi", settings=settings, timeout_s=30)
    line = _one_error_line(no_stream.stderr)
    assert no_stream.code == 1 and "no stream stores" in line and repr(settings.prefix) in line, line
    no_server = await turnstile("--server", "nats://127.0.0.1:1", "sessions", timeout_s=30)
    assert no_server.code == 1 and "cannot connect to NATS" in _one_error_line(no_server.stderr)

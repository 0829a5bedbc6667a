"""A long conversation never grows a checkpoint past what the broker stores (MQ-3, KS-21).

A snapshot repeats the conversation three times (transcript, projection, chatend text), so a
conversation can outgrow the server's ``max_payload`` long before its context window fills; a
checkpoint the broker refuses would leave every later message of the session unanswered. The
server here runs with a small ``max_payload`` so a few turns reach it: the session is compacted
(its oldest turns summarised) before its snapshot would pass the budget, and every message is
answered.
"""

from __future__ import annotations

import uuid

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.tool_helpers import CHAT, tool_results

SERVER_MAX_PAYLOAD = 65_536
TEXT_CHARS = 1_000  # a turn adds ~2 kB of text, ~7 kB of snapshot: past the limit within ten turns
TURNS = 24


@pytest.fixture
def nats_config() -> str:
    return f"max_payload: {SERVER_MAX_PAYLOAD}\n"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={
        "context_window_tokens": 1_000_000,  # the window alone would never compact this conversation
        "tool_modules": ["tests.integration.plugin_tools"],
    })


@pytest.mark.rule("MQ-3")
async def test_a_conversation_longer_than_the_max_payload_is_compacted_and_every_message_answered(
    service: TurnstileService, nc: Client, subjects: Subjects, caplog: pytest.LogCaptureFixture
) -> None:
    # MQ-3: a complete checkpoint after every durable transition, each one stored
    assert nc.max_payload == SERVER_MAX_PAYLOAD
    sid = f"long-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    dead = await Collector().attach(nc, subjects.dlq_inbound)
    for turn in range(TURNS):
        await publish_inbound(nc, subjects, inbound(sid, f"turn {turn} " + "t" * TEXT_CHARS))
        await wait_for(lambda n=turn + 1: len(replies.messages) >= n, what=f"the answer to message {turn}")
    assert dead.messages == []
    refused = [r.getMessage() for r in caplog.records if "MaxPayloadError" in r.getMessage()]
    assert refused == [], "a checkpoint was refused by the broker"
    assert [r["text"].split()[:3] for r in replies.json()] == [["echo:", "turn", str(t)] for t in range(TURNS)]
    assert all(len(m.data) <= SERVER_MAX_PAYLOAD for m in checkpoints.messages)
    last = orjson.loads(checkpoints.messages[-1].data)["snapshot"]
    assert last["transcript"][0]["kind"] == "summary", "the oldest turns were summarised"
    kept = [i["payload"]["text"].split()[1] for i in last["transcript"] if i["kind"] == "user_message"]
    assert kept and kept[-1] == str(TURNS - 1) and len(kept) < TURNS
    # The journal still holds every message (KS-21: nothing silently dropped): a restore from scratch sees them.
    versions = await api(nc, subjects, "session", "state_versions", {"session_id": sid, "limit": 1000})
    assert versions["ok"], versions
    assert sum(1 for step in versions["result"] if step["kind"] == "user_message") == TURNS


@pytest.mark.rule("MQ-3")
async def test_a_tool_result_larger_than_the_max_payload_is_cut_and_the_session_goes_on(
    service: TurnstileService, nc: Client, subjects: Subjects, caplog: pytest.LogCaptureFixture
) -> None:
    # MQ-3: kept whole, the result would be in every later snapshot and no checkpoint could be stored again
    sid = f"flood-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    await publish_inbound(nc, subjects, inbound(sid, '/tool flood {"chars": 200000}\n/say after the flood', chat=CHAT))
    await wait_for(lambda: replies.messages, what="the answer after the tool")
    await publish_inbound(nc, subjects, inbound(sid, "and then", chat=CHAT))
    await wait_for(lambda: len(replies.messages) >= 2, what="the next message's answer")
    assert [r["text"] for r in replies.json()] == ["after the flood", "echo: and then"]
    [result] = tool_results(checkpoints)
    assert result["content"].startswith("f" * 100) and result["content"].endswith("more characters]")
    assert all(len(m.data) <= SERVER_MAX_PAYLOAD for m in checkpoints.messages)
    refused = [r.getMessage() for r in caplog.records if "MaxPayloadError" in r.getMessage()]
    assert refused == [], "a checkpoint was refused by the broker"

"""SM-24 inside turns: the take rules a tool call meets are the ones take.check answers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import results_by_call


def uid(prefix: str) -> str:
    return f"tg:{prefix}:{uuid.uuid4().hex[:8]}"


async def answered(nc: Client, subjects: Subjects, sid: str, body: dict[str, Any]) -> None:
    replies = await Collector().attach(nc, subjects.outbound("tg", sid))
    await publish_inbound(nc, subjects, body)
    await wait_for(lambda: replies.messages, what=f"the reply in {sid}")


async def history_results(nc: Client, subjects: Subjects, group: str, target: str, user_id: str) -> list[dict[str, Any]]:
    checkpoints = await Collector().attach(nc, subjects.checkpoint(group))
    text = f'/tool read_session_history {{"session_id": "{target}"}}\n/say read'
    body = inbound(group, text, platform="tg", sender={"user_id": user_id},
                   chat={"type": "group", "target_id": "g1", "multi_party": True})
    await answered(nc, subjects, group, body)
    await wait_for(lambda: any(cp["transition"] == "turn_ended" for cp in checkpoints.json()), what="turn end")
    transcript = checkpoints.json()[-1]["snapshot"]["transcript"]
    return [r for results in results_by_call(transcript).values() for r in results]


@pytest.mark.rule("SM-24", "SM-26")
async def test_a_user_may_read_her_own_private_chat_from_a_group_turn_but_not_someone_elses(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # The turn's principal is the sender on the message's platform ("tg:u1"), the same
    # principal take.check is asked about: u1's own one-to-one chat is exempt from
    # read_others_dms (SM-26); u2 reading it is refused with the others-DM reason.
    dm, group = uid("dm"), uid("group")
    await answered(nc, subjects, dm, inbound(
        dm, "my secret plans", platform="tg", sender={"user_id": "u1"},
        chat={"type": "private", "target_id": "u1", "multi_party": False, "declared_one_to_one": True},
    ))
    await answered(nc, subjects, group, inbound(
        group, "hello group", platform="tg", sender={"user_id": "u1"},
        chat={"type": "group", "target_id": "g1", "multi_party": True},
    ))
    reply = await api(nc, subjects, "session", "take_settings",
                      {"session_id": group, "settings": {"scope": "same-platform"}})
    assert reply["ok"], reply
    check = {"current_id": group, "target_id": dm, "principal": {"platform": "tg", "user_id": "u1"}}
    assert (await api(nc, subjects, "take", "check", check))["result"]["ok"] is True

    own = await history_results(nc, subjects, group, dm, "u1")
    assert len(own) == 1 and own[0]["ok"] is True, own
    assert "my secret plans" in str(own[0]["content"])

    other = await history_results(nc, subjects, group, dm, "u2")
    refusal = [r for r in other if r not in own]
    assert len(refusal) == 1 and refusal[0]["ok"] is False, other
    assert "other people's private chats" in str(refusal[0]["content"])


@pytest.mark.rule("SM-9", "SM-11")
async def test_room_class_is_on_the_record_and_a_relayed_message_is_marked_from_elsewhere(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # SM-9: a group room is `room`, a CLI-created session `owner-only`, a filed-by-id one `internal`.
    group = uid("group")
    await answered(nc, subjects, group, inbound(
        group, "hi", platform="tg", sender={"user_id": "u1"}, chat={"type": "group", "target_id": "g1", "multi_party": True},
    ))
    got = await api(nc, subjects, "session", "get", {"session_id": group})
    assert got["result"]["room_class"] == "room"
    cli = (await api(nc, subjects, "session", "create", {"creation": {"created_from": "cli"}}))["result"]
    assert cli["room_class"] == "owner-only"
    filed = (await api(nc, subjects, "session", "create", {}))["result"]
    assert filed["room_class"] == "internal"
    # SM-11: the same room reached from another platform: the turn says so, a native one does not.
    events = await Collector().attach(nc, subjects.events_of(group))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(group))
    replies = await Collector().attach(nc, subjects.outbound("webui", group))
    await publish_inbound(nc, subjects, inbound(group, "relayed", platform="webui", sender={"user_id": "u1"}))
    await wait_for(lambda: replies.messages, what="the relayed message's reply")
    started = [e["data"] for e in events.json() if e["type"] == "turn.started"]
    assert started and started[-1]["from_elsewhere"] is True
    await wait_for(lambda: checkpoints.messages, what="a checkpoint")
    staged = [i for i in checkpoints.json()[-1]["snapshot"]["transcript"] if i["kind"] == "user_message"]
    assert staged[-1]["payload"].get("from_elsewhere") is True
    assert "from_elsewhere" not in staged[0]["payload"]

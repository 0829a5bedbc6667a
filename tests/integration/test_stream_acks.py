"""The hot-path publisher's acks: stream sequences, the fence refusal, a subject no stream captures."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig
from nats.js.errors import APIError, NoStreamResponseError

from consumers.buffered_publish import header_block
from consumers.nats_flush import flush
from consumers.publisher import FENCE_HEADER, WRONG_LAST_SEQUENCE, Publisher, StreamAcks
from consumers.settings import Settings
from consumers.streams import stream_configs
from core.errors import CheckpointFailed
from schemas.subjects import Subjects
from tests.waiting import wait_for


def _service_stream(subjects: Subjects, name: str) -> StreamConfig:
    """The service's own configuration of its stream ``name`` (consumers/streams.py)."""
    return next(c for c in stream_configs(Settings(prefix=subjects.prefix), subjects) if c.name == name)


async def test_acks_carry_the_sequence_a_stale_fence_is_refused_and_no_stream_is_an_error(nc: Client) -> None:
    # MQ-3: checkpoints are acknowledged with their stream sequence; a write fenced on an old
    # sequence is refused by the broker (err 10071); a subject without a stream fails, not hangs.
    name = f"ACKS_{uuid.uuid4().hex[:6]}"
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    acks = StreamAcks(nc)
    first = await (await acks.send(f"{name}.a", b"one"))
    pipelined = [await acks.send(f"{name}.b", str(i).encode()) for i in range(20)]
    assert await asyncio.gather(*pipelined) == list(range(first + 1, first + 21))
    fenced = await (await acks.send(f"{name}.a", b"two", FENCE_HEADER % first))
    assert fenced == first + 21
    with pytest.raises(APIError) as refused:
        await (await acks.send(f"{name}.a", b"stale", FENCE_HEADER % first))
    assert refused.value.err_code == WRONG_LAST_SEQUENCE
    await js.delete_stream(name)


async def test_a_publish_no_stream_answers_is_sent_again_until_stored_or_its_retry_window_ends(nc: Client) -> None:
    # A publish answered "no responders" (a stream electing a leader looks like this) is sent again
    # with its token and stored once the stream answers; the barrier waits for it meanwhile. With no
    # stream for the whole window it fails with NoStreamResponseError, not a hang.
    name = f"LATE_{uuid.uuid4().hex[:6]}"
    js = nc.jetstream()
    retries: list[int] = []
    acks = StreamAcks(nc, retried=lambda: retries.append(1))
    first = await acks.send(f"{name}.a", b"before the stream")
    unwatched = await acks.send_to(None, f"{name}.b", b"nobody waits")
    barrier = asyncio.ensure_future(acks.stored_so_far(10.0))
    await wait_for(lambda: len(retries) >= 2, timeout_s=5, what="both publishes to be sent again")
    assert not first.done() and not barrier.done()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    assert await asyncio.wait_for(first, 5) in (1, 2)
    assert await asyncio.wait_for(barrier, 5)
    state = (await js.stream_info(name)).state
    assert (state.messages, unwatched) == (2, None)  # each stored once
    await js.delete_stream(name)

    short = StreamAcks(nc, retry_s=0.6)
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(await short.send(f"nostream-{uuid.uuid4().hex[:6]}", b"x"), 5)
    assert await short.stored_so_far(1.0)  # the failed publish holds no barrier


async def test_a_checkpoint_ack_is_kept_when_its_waiter_is_cancelled_and_a_stale_fence_fails(nc: Client) -> None:
    # MQ-3 through the Publisher: the fenced checkpoint's ack (a KeptAck) survives a cancelled wait
    # (shutdown), and a checkpoint fenced on an old sequence is CheckpointFailed.
    subjects = Subjects(prefix=f"ka{uuid.uuid4().hex[:6]}")
    js = nc.jetstream()
    await js.add_stream(_service_stream(subjects, subjects.checkpoint_stream))
    pub = Publisher(nc, js, subjects, timeout_s=5.0)
    first = await pub.send_checkpoint("s-1", b"{}", None)
    waiting = asyncio.ensure_future(pub.checkpoint_acked("s-1", first, None))
    await asyncio.sleep(0)  # waiting (the ack is a broker round trip away)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    seq = await pub.checkpoint_acked("s-1", first, None)
    assert seq == 1
    assert await pub.checkpoint_acked("s-1", await pub.send_checkpoint("s-1", b"{}", seq), seq) == 2
    stale = await pub.send_checkpoint("s-1", b"{}", seq)
    with pytest.raises(CheckpointFailed, match="another worker"):
        await pub.checkpoint_acked("s-1", stale, seq)
    await js.delete_stream(subjects.checkpoint_stream)


async def test_stored_so_far_returns_once_every_earlier_publish_is_in_its_stream(nc: Client) -> None:
    # The barrier session.deleted waits for (SM-22 is marked on tests/unit/test_manager_events.py,
    # which fails when the wait goes: the server's own store order makes this one pass either way).
    # Every earlier publish is in its stream when the wait returns.
    name = f"BAR_{uuid.uuid4().hex[:6]}"
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    acks = StreamAcks(nc)
    assert await acks.stored_so_far(5.0)  # nothing sent yet
    for i in range(200):
        await acks.send_to(None, f"{name}.s{i % 7}", b"x" * 512)  # unwatched, as replies and events are
    assert await acks.stored_so_far(5.0)
    assert (await js.stream_info(name)).state.messages == 200  # read once, not polled
    await js.delete_stream(name)


async def test_stored_so_far_is_false_when_an_earlier_publish_is_never_answered(nc: Client) -> None:
    # A subject a plain subscriber takes (no stream, so no ack and no "no responders"): the wait
    # ends after its timeout instead of holding a deletion up for ever.
    subject = f"noack.{uuid.uuid4().hex[:6]}"
    sub = await nc.subscribe(subject)
    acks = StreamAcks(nc)
    await acks.send_to(None, subject, b"x")
    assert not await acks.stored_so_far(0.2)
    await sub.unsubscribe()


async def test_a_publish_with_a_header_and_no_answer_is_sent_again_and_one_without_is_not(nc: Client) -> None:
    # A publish whose answer is lost (the leader it reached stepped down, the connection to a killed node
    # went) looks like this: something took it and nobody answered. A plain subscriber plays that part;
    # once it is gone and a stream takes the subjects, the publish that can be sent twice (its header: a
    # fence or a Nats-Msg-Id) is sent again and stored once; one with no header is not sent twice.
    name = f"LOST_{uuid.uuid4().hex[:6]}"
    js = nc.jetstream()
    swallow = await nc.subscribe(f"{name}.>")
    await flush(nc)
    retries: list[int] = []
    acks = StreamAcks(nc, resend_s=0.2, retried=lambda: retries.append(1))
    reply = await acks.send(f"{name}.reply", b"once", header_block({"Nats-Msg-Id": "r-1"}))
    event = await acks.send(f"{name}.event", b"at most once")  # no header
    await wait_for(lambda: swallow.pending_msgs >= 2, timeout_s=5, what="both publishes to be taken")
    await swallow.unsubscribe()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    assert await asyncio.wait_for(reply, 5) == 1
    # Had the event been sent again with the reply, its ack would come before this later publish's.
    assert await asyncio.wait_for(await acks.send(f"{name}.probe", b"later"), 5) == 2
    assert retries and not event.done()
    state = (await js.stream_info(name)).state
    assert state.messages == 2  # the reply once and the probe; the event was not sent again
    event.cancel()
    await js.delete_stream(name)


async def test_a_resent_checkpoint_refused_by_its_fence_is_taken_as_stored_when_its_first_copy_is(nc: Client) -> None:
    # Seen in CI on a cluster: a checkpoint's first copy was stored but its answer lost (its leader stepped
    # down), so the copy sent again was refused by the fence, and the turn ran again for nothing. A resent
    # checkpoint refused by its fence is taken as stored when the subject's last checkpoint, written after
    # the fence, is its very payload; another payload there (another writer) is still a refusal.
    subjects = Subjects(prefix=f"rs{uuid.uuid4().hex[:6]}")
    js = nc.jetstream()
    await js.add_stream(_service_stream(subjects, subjects.checkpoint_stream))
    pub = Publisher(nc, js, subjects, timeout_s=5.0)
    first = await pub.checkpoint_acked("s-1", await pub.send_checkpoint("s-1", b'{"v": 1}', None), None)
    stored = await pub.checkpoint_acked("s-1", await pub.send_checkpoint("s-1", (b'{"v": ', b"2}"), first), first)

    again = await pub.send_checkpoint("s-1", (b'{"v": ', b"2}"), first)  # the same publish, sent again
    again.resent = True
    assert await pub.checkpoint_acked("s-1", again, first) == stored

    other = await pub.send_checkpoint("s-1", b'{"v": 3}', first)
    other.resent = True
    with pytest.raises(CheckpointFailed, match="another worker"):
        await pub.checkpoint_acked("s-1", other, first)
    not_resent = await pub.send_checkpoint("s-1", b'{"v": 2}', first)
    with pytest.raises(CheckpointFailed, match="another worker"):
        await pub.checkpoint_acked("s-1", not_resent, first)
    await js.delete_stream(subjects.checkpoint_stream)


async def test_an_event_whose_answer_is_lost_is_sent_again_and_stored_once(nc: Client) -> None:
    # Events carry a Nats-Msg-Id and their stream drops a second copy, so an event whose answer was lost at
    # a leader's step-down is sent again like a reply: stored once, not lost (a watched event, whose turn
    # waits for it, and an unwatched one, the per-turn session.updated).
    subjects = Subjects(prefix=f"ev{uuid.uuid4().hex[:6]}")
    js = nc.jetstream()
    swallow = await nc.subscribe(f"{subjects.prefix}.events.>")
    await flush(nc)
    pub = Publisher(nc, js, subjects, timeout_s=5.0, resend_s=0.2)
    watched = await pub.emit("s-1", "turn.ended", {"outcome": "replied"})
    await pub.emit_unwatched("s-1", "session.updated", {"change": "turn_ended"})
    await wait_for(lambda: swallow.pending_msgs >= 2, timeout_s=5, what="both events to be taken")
    taken = [await swallow.next_msg(1) for _ in range(2)]
    assert all(m.headers and m.headers.get("Nats-Msg-Id") for m in taken)
    await swallow.unsubscribe()
    events = _service_stream(subjects, subjects.events_stream)
    await js.add_stream(events)
    assert await asyncio.wait_for(watched, 5) == 1
    await wait_for(lambda: not pub._acks._waiting, timeout_s=5, what="the unwatched event to be answered")
    await asyncio.wait_for(await pub.emit("s-1", "usage", {"input": 1, "output": 1}), 5)
    # Each check until the stream answered sent both again; the stream kept one copy of each.
    state = (await js.stream_info(subjects.events_stream)).state
    assert state.messages == 3
    stored = [await js.get_msg(subjects.events_stream, seq) for seq in (1, 2, 3)]
    assert [m.subject.split(".events.")[1].split(".", 1)[1] for m in stored] == ["turn.ended", "session.updated", "usage"]
    assert len({m.headers["Nats-Msg-Id"] for m in stored if m.headers}) == 3
    await js.delete_stream(subjects.events_stream)


async def test_an_event_stored_with_its_answer_lost_is_sent_again_and_dropped_as_a_duplicate(nc: Client) -> None:
    # The other half of a lost answer: the stream stored the event and its answer never came back. The copy
    # sent again carries the same Nats-Msg-Id, the events stream drops it and answers with the first copy's
    # sequence, so the turn waiting for the event goes on and the stream holds it once.
    subjects = Subjects(prefix=f"ev{uuid.uuid4().hex[:6]}")
    js = nc.jetstream()
    events = _service_stream(subjects, subjects.events_stream)
    assert events.duplicate_window == 30.0
    await js.add_stream(events)
    pub = Publisher(nc, js, subjects, timeout_s=5.0, resend_s=0.2)
    acks = pub._acks
    on_ack, dropped = acks._on_ack, []

    def lose_the_first_answer(subject: bytes, data: bytes, headers: dict[str, str] | None) -> None:
        if not dropped:
            dropped.append(data)
            return
        on_ack(subject, data, headers)

    acks._on_ack = lose_the_first_answer  # type: ignore[method-assign]  # before the ack subscription is made
    watched = await pub.emit("s-1", "turn.ended", {"outcome": "replied"})
    assert await asyncio.wait_for(watched, 5) == 1
    assert dropped and orjson.loads(dropped[0])["seq"] == 1
    assert (await js.stream_info(subjects.events_stream)).state.messages == 1
    await js.delete_stream(subjects.events_stream)


async def test_an_unwatched_event_never_answered_is_given_up_after_its_resends_and_holds_no_barrier(nc: Client) -> None:
    # Nobody waits for an unwatched event (the per-turn session.updated) to give up on it, so its resends end
    # ``timeout_s`` after the first: it is then logged and forgotten, and a deletion's barrier does not wait for it.
    subjects = Subjects(prefix=f"ev{uuid.uuid4().hex[:6]}")
    swallow = await nc.subscribe(f"{subjects.prefix}.events.>")  # takes every copy, never answers
    await flush(nc)
    pub = Publisher(nc, nc.jetstream(), subjects, timeout_s=0.6, resend_s=0.2)
    await pub.emit_unwatched("s-1", "session.updated", {"change": "turn_ended"})
    await wait_for(lambda: swallow.pending_msgs >= 3, timeout_s=5, what="the event and two copies to be sent")
    await wait_for(lambda: not pub._acks._waiting, timeout_s=5, what="the unanswered event to be given up")
    copies = swallow.pending_msgs
    assert await pub.stored_so_far()
    assert len({(await swallow.next_msg(1)).headers["Nats-Msg-Id"] for _ in range(copies)}) == 1  # one event
    await swallow.unsubscribe()

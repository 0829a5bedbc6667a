"""Publishing while a stream elects a leader, on a real 3-node cluster.

When an R3 stream's leader steps down (a rolling restart's lame duck, an operator's
``stream cluster step-down``) or its node dies, the stream has no leader for a moment and
nats-server answers a publish to it with "no responders": nothing was stored. The service's
publisher (``consumers/publisher.py`` ``StreamAcks``) sends such a publish again until the
stream answers, so checkpoints, events and replies are delayed by the election instead of
failing the turn. Measured before the retry: 41 of 6,288 publishes failed over five
step-downs; after it: 0 of 6,336. A publish that reaches the old leader as it steps down can
get no answer at all; one with a header (a fenced checkpoint, a reply or an event with
``Nats-Msg-Id``) is then sent again, and the stream keeps one copy.
"""

from __future__ import annotations

import asyncio
import uuid

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from consumers.cli_stream import publish_inbound
from consumers.cli_support import Cli
from consumers.connect import patiently
from consumers.nats_cluster import NatsCluster
from consumers.publisher import Publisher, StreamAcks
from consumers.settings import Settings
from consumers.streams import stream_configs
from schemas.subjects import Subjects
from tests.integration.stream_leaders import leader_of, step_down
from tests.waiting import wait_for

STEP_DOWNS = 3
# How many runs the lost-answer test repeats its step-downs: a publish loses its answer in about 4 of
# 14 step-down rounds, so more rounds meet it more often (the test holds in every round either way).
EVENT_ROUNDS = 2


@pytest.mark.timeout(120)
async def test_publishes_during_leader_step_downs_are_all_stored_once(nats_cluster: NatsCluster) -> None:
    stream = "E" + uuid.uuid4().hex[:8].upper()
    nc = await nats.connect(nats_cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await patiently(lambda: nc.jetstream(timeout=10).add_stream(
            StreamConfig(name=stream, subjects=[f"{stream}.>"], num_replicas=3)
        ), "create the stream", 60)
        await wait_for(lambda: leader_of(nc, stream), timeout_s=30, what="a stream leader")
        retries: list[int] = []
        acks = StreamAcks(nc, retry_s=20.0, retried=lambda: retries.append(1))
        sent: list[asyncio.Future[int]] = []
        stop = asyncio.Event()

        async def publish_steadily() -> None:
            # Some publishes must land in the leaderless moment: one every 2 ms, acks not awaited.
            while not stop.is_set():
                sent.append(await acks.send(f"{stream}.{len(sent) % 5}", b"%d" % len(sent)))
                await asyncio.sleep(0.002)

        publishing = asyncio.create_task(publish_steadily())
        for _ in range(STEP_DOWNS):
            await step_down(nc, stream)
        stop.set()
        await publishing

        # A publish that reaches the old leader just as it steps down can get no answer at all (its
        # proposal dropped; seen with and without the retry: 4 in 14 runs, at most one per step-down).
        # Such a publish is in doubt, as nats.go's would be; what the retry removes is the failure.
        await wait_for(lambda: not acks.retrying and sum(not f.done() for f in sent) <= STEP_DOWNS,
                       timeout_s=30, what="the publishes to be answered")
        answered = [f for f in sent if f.done()]
        failed = [f.exception() for f in answered if f.exception() is not None]
        assert not failed, f"{len(failed)} of {len(sent)} publishes failed, e.g. {failed[0]!r}"
        sequences = sorted(f.result() for f in answered)
        assert len(set(sequences)) == len(sequences)  # each stored once
        assert retries, "no publish met a leaderless moment: the test did not exercise the retry"
        stored = (await nc.jetstream(timeout=10).stream_info(stream)).state.messages
        assert len(answered) <= stored <= len(sent)
    finally:
        await nc.close()


@pytest.mark.timeout(120)
async def test_turnstile_sends_inbound_publishes_are_stored_once_across_step_downs(nats_cluster: NatsCluster) -> None:
    # `turnstile send`'s publish (consumers/cli_stream.py) asks again under the same Nats-Msg-Id while
    # the inbound stream has no leader. Before, nats-py's plain publish failed with "no response
    # from stream" (the command exited 1) in such a moment.
    settings = Settings(nats_url=nats_cluster.urls[0], prefix="c" + uuid.uuid4().hex[:8])
    cli = Cli(settings=settings)
    stream = cli.subjects.inbound_stream
    nc = await nats.connect(nats_cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        spec = next(s for s in cli.subjects.streams() if s.name == stream)
        await patiently(lambda: nc.jetstream(timeout=10).add_stream(
            StreamConfig(name=stream, subjects=list(spec.subjects), num_replicas=3, duplicate_window=120)
        ), "create the stream", 60)
        await wait_for(lambda: leader_of(nc, stream), timeout_s=30, what="a stream leader")
        sent: list[str] = []
        stop = asyncio.Event()

        async def send_steadily() -> None:
            while not stop.is_set():
                msg_id = uuid.uuid4().hex
                subject = cli.subjects.inbound("cli", f"s{len(sent) % 5}")
                await publish_inbound(cli, nc, subject, msg_id.encode(), msg_id, timeout_s=20)
                sent.append(msg_id)
                await asyncio.sleep(0.002)

        sending = asyncio.create_task(send_steadily())
        for _ in range(STEP_DOWNS):
            await step_down(nc, stream)
        stop.set()
        await sending  # raises CliError if a publish was not stored

        stored = (await nc.jetstream(timeout=10).stream_info(stream)).state.messages
        assert stored == len(sent)  # each once
    finally:
        await nc.close()


@pytest.mark.timeout(180)
async def test_events_sent_across_step_downs_are_all_answered_and_stored_exactly_once(nats_cluster: NatsCluster) -> None:
    # An event carries a Nats-Msg-Id, so one whose answer was lost at a step-down (its leader stepped down as
    # it arrived) is sent again after 2-4 s and the stream keeps one copy. Before, such an event waited out
    # the 10 s ack timeout and was lost when the old leader had not stored it (2 of 5 such publishes).
    subjects = Subjects(prefix="ev" + uuid.uuid4().hex[:8])
    settings = Settings(nats_url=nats_cluster.urls[0], prefix=subjects.prefix, stream_replicas=3)
    stream = subjects.events_stream
    nc = await nats.connect(nats_cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10)
        config = next(c for c in stream_configs(settings, subjects) if c.name == stream)
        await patiently(lambda: js.add_stream(config), "create the stream", 60)
        await wait_for(lambda: leader_of(nc, stream), timeout_s=30, what="a stream leader")
        pub = Publisher(nc, js, subjects, timeout_s=20.0)
        watched: list[asyncio.Future[int]] = []
        unwatched = 0

        async def emit_steadily(stop: asyncio.Event) -> None:
            nonlocal unwatched
            while not stop.is_set():
                n = len(watched) + unwatched
                if n % 3:
                    watched.append(await pub.emit(f"s{n % 5}", "turn.ended", {"n": n}))
                else:  # the per-turn session.updated: nobody waits for its ack
                    await pub.emit_unwatched(f"s{n % 5}", "session.updated", {"n": n})
                    unwatched += 1
                await asyncio.sleep(0.002)

        for _ in range(EVENT_ROUNDS):
            stop = asyncio.Event()
            emitting = asyncio.create_task(emit_steadily(stop))
            for _ in range(STEP_DOWNS):
                await step_down(nc, stream)
            stop.set()
            await emitting

        await wait_for(lambda: all(f.done() for f in watched), timeout_s=40, what="every event to be answered")
        failed = [f.exception() for f in watched if f.exception() is not None]
        assert not failed, f"{len(failed)} of {len(watched)} events failed, e.g. {failed[0]!r}"
        assert len({f.result() for f in watched}) == len(watched)
        sent = len(watched) + unwatched
        await wait_for(
            lambda: _stored(js, stream, sent), timeout_s=40, what=f"{sent} events stored, each once"
        )
    finally:
        await nc.close()


async def _stored(js: JetStreamContext, stream: str, sent: int) -> bool:
    stored = (await js.stream_info(stream)).state.messages
    assert stored <= sent, f"{stored} events stored of {sent} sent: some twice"
    return stored == sent

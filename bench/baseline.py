"""Baseline A: a hand-written nats-py loop doing turnstile's JetStream work per inbound message.

Same streams and consumer settings (``consumers.streams``) under its own prefix;
a durable pull consumer fetched in batches of ``fetch_batch``; per message the
measured number of checkpoint, event and outbound publishes with the measured
stored sizes (events and replies with turnstile's ``Nats-Msg-Id`` headers); all publish
acks of a batch gathered, then the batch acked. No store, no model loop, no fencing
header: the physical limit of this shape.

Run as a child process: ``python -m bench.baseline --nats-url … --prefix … --shape JSON``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable

import orjson
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import APIError

from bench.shape import EventIds, PublishShape, Spreader, payload_size
from bench.worker_link import open_worker
from consumers.nats_flush import flush
from consumers.settings import Settings
from schemas.tokens import encode_sid

READY = "baseline ready"
TOO_MANY_REQUESTS = 10167  # the server's publish back-pressure (stream ingest queue full)
RETRY_DELAY_S = 0.005
MAX_RETRIES = 400


async def publish(js: JetStreamContext, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> None:
    """Publish and await the ack, retrying (bounded) while the server pushes back with 429."""
    for attempt in range(MAX_RETRIES):
        try:
            await js.publish(subject, payload, headers=headers, timeout=30)
            return
        except APIError as exc:
            if exc.err_code != TOO_MANY_REQUESTS or attempt == MAX_RETRIES - 1:
                raise
            await asyncio.sleep(RETRY_DELAY_S * (1 + attempt % 10))


def baseline_settings(nats_url: str, prefix: str) -> Settings:
    return Settings(nats_url=nats_url, prefix=prefix, consumer_name="baseline-inbound")


async def run(nats_url: str, prefix: str, shape: PublishShape, max_s: float) -> None:
    link = await open_worker(baseline_settings(nats_url, prefix), max_s)
    settings, subjects, nc, js, psub, stop = link.settings, link.subjects, link.nc, link.js, link.psub, link.stop

    ck = shape.streams["checkpoint"]
    ev = shape.streams["events"]
    out = shape.streams["outbound"]
    ck_spread, ev_spread, out_spread = Spreader(ck.per_msg), Spreader(ev.per_msg), Spreader(out.per_msg)
    sample_token = encode_sid("bench-00000000-0")
    # The checkpoint carries no fencing header here, so its payload takes those bytes instead.
    ck_payload = b"x" * payload_size(ck.stored_bytes_per_msg, subjects.checkpoint("bench-00000000-0"), 0)
    event_ids = EventIds()  # events carry a Nats-Msg-Id, as turnstile's do
    ev_payload = b"x" * payload_size(
        ev.stored_bytes_per_msg, f"{prefix}.events.{sample_token}.turn.ended", event_ids.header_bytes
    )
    msg_id_header = len(f"NATS/1.0\r\nNats-Msg-Id: bench-00000000-0:{'0' * 32}:0\r\n\r\n")
    out_size = payload_size(out.stored_bytes_per_msg, subjects.outbound("cli", "bench-00000000-0"), msg_id_header)
    # Drain measurements start when the bench says go, so the backlog's clock starts with the loop.
    go = await nc.subscribe(f"{prefix}.bench.go")
    await flush(nc)
    print(READY, flush=True)
    go_msg = asyncio.ensure_future(go.next_msg(timeout=max_s))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({go_msg, stopped}, return_when=asyncio.FIRST_COMPLETED)
    go_msg.cancel()
    stopped.cancel()

    processed = 0
    silent = 0
    while not stop.is_set():
        try:
            msgs = await psub.fetch(settings.fetch_batch, timeout=settings.fetch_timeout_s)
        except (NatsTimeoutError, TimeoutError):  # nats-py raises either when a fetch times out
            # Like the service (consumers/inbound_loop.py): a pull subscription can go silent while the
            # consumer has messages (nats.py #504); after two silent fetches, check and bind afresh.
            silent += 1
            if silent >= 2:
                silent = 0
                info = await js.consumer_info(subjects.inbound_stream, settings.consumer_name)
                if info.num_pending:
                    print(f"fetch silent with {info.num_pending} pending after {processed} messages; binding afresh",
                          file=sys.stderr, flush=True)
                    await psub.unsubscribe()
                    psub = await js.pull_subscribe_bind(durable=settings.consumer_name, stream=subjects.inbound_stream)
            continue
        except Exception as exc:  # a closed connection at shutdown
            if stop.is_set():
                break
            # Like the service: a pull subscription can go silent (nats.py #504); bind afresh.
            print(f"fetch failed: {exc!r}; binding afresh", file=sys.stderr, flush=True)
            await asyncio.sleep(0.2)
            try:
                await psub.unsubscribe()
                psub = await js.pull_subscribe_bind(durable=settings.consumer_name, stream=subjects.inbound_stream)
            except Exception as bind_exc:
                print(f"rebinding failed: {bind_exc!r}", file=sys.stderr, flush=True)
            continue
        publishes: list[Awaitable[None]] = []
        for m in msgs:
            inbound = orjson.loads(m.data)
            sid = inbound["session_id"]
            token = encode_sid(sid)
            for _ in range(ck_spread.take()):
                publishes.append(publish(js, f"{prefix}.checkpoint.{token}", ck_payload))
            for _ in range(ev_spread.take()):
                publishes.append(publish(js, f"{prefix}.events.{token}.turn.ended", ev_payload, event_ids.headers()))
            # Every message is answered (the driver times publish → first reply), as turnstile answers
            # every one; the measured rate can be a little under one reply per message.
            for seq in range(max(1, out_spread.take())):
                reply = {
                    "session_id": sid,
                    "generation": 1,
                    "turn_id": inbound["id"],
                    "seq": seq,
                    "reply_to": inbound["id"],
                    "text": "echo: " + inbound["text"],
                }
                body = orjson.dumps(reply)
                body += b" " * max(0, out_size - len(body))
                publishes.append(
                    publish(
                        js,
                        f"{prefix}.outbound.{inbound['platform']}.{token}",
                        body,
                        headers={"Nats-Msg-Id": f"{sid}:{inbound['id']}:{seq}"},
                    )
                )
        await asyncio.gather(*publishes)
        await asyncio.gather(*(m.ack() for m in msgs))
        silent = 0
        processed += len(msgs)
    print(f"baseline processed {processed} messages", flush=True)
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception as exc:
        print(f"closing the connection: {exc!r}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--shape", required=True, help="PublishShape as JSON")
    parser.add_argument("--max-s", type=float, default=600.0, help="stop by itself after this")
    args = parser.parse_args()
    shape = PublishShape.from_dict(orjson.loads(args.shape))
    started = time.monotonic()
    asyncio.run(run(args.nats_url, args.prefix, shape, args.max_s))
    print(f"baseline stopped after {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()

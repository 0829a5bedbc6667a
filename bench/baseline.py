"""Baseline A: a hand-written nats-py loop doing turnstile's JetStream work per inbound message.

Same streams and consumer settings (``consumers.streams``) under its own prefix;
a durable pull consumer fetched in batches of ``fetch_batch``; per message the
measured number of checkpoint, event and outbound publishes with the measured
stored sizes; all publish acks of a batch gathered, then the batch acked. No
store, no model loop, no fencing header: the physical limit of this shape.

Run as a child process: ``python -m bench.baseline --nats-url … --prefix … --shape JSON``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

import nats
import orjson
from nats.errors import TimeoutError as NatsTimeoutError

from bench.shape import PublishShape, Spreader, payload_size
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects
from schemas.tokens import encode_sid

READY = "baseline ready"


def baseline_settings(nats_url: str, prefix: str) -> Settings:
    return Settings(nats_url=nats_url, prefix=prefix, consumer_name="baseline-inbound")


async def run(nats_url: str, prefix: str, shape: PublishShape, max_s: float) -> None:
    settings = baseline_settings(nats_url, prefix)
    subjects = Subjects(prefix)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, settings, subjects)
    psub = await js.pull_subscribe_bind(durable=settings.consumer_name, stream=subjects.inbound_stream)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(max_s, stop.set)

    ck = shape.streams["checkpoint"]
    ev = shape.streams["events"]
    out = shape.streams["outbound"]
    ck_spread, ev_spread, out_spread = Spreader(ck.per_msg), Spreader(ev.per_msg), Spreader(out.per_msg)
    sample_token = encode_sid("bench-00000000-0")
    # The checkpoint carries no fencing header here, so its payload takes those bytes instead.
    ck_payload = b"x" * payload_size(ck.stored_bytes_per_msg, subjects.checkpoint("bench-00000000-0"), 0)
    ev_payload = b"x" * payload_size(ev.stored_bytes_per_msg, f"{prefix}.events.{sample_token}.turn.ended", 0)
    msg_id_header = len(f"NATS/1.0\r\nNats-Msg-Id: bench-00000000-0:{'0' * 32}:0\r\n\r\n")
    out_size = payload_size(out.stored_bytes_per_msg, subjects.outbound("cli", "bench-00000000-0"), msg_id_header)
    print(READY, flush=True)

    while not stop.is_set():
        try:
            msgs = await psub.fetch(settings.fetch_batch, timeout=settings.fetch_timeout_s)
        except NatsTimeoutError:
            continue
        except Exception as exc:  # a closed connection at shutdown
            if stop.is_set():
                break
            print(f"fetch failed: {exc!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.2)
            continue
        publishes = []
        for m in msgs:
            inbound = orjson.loads(m.data)
            sid = inbound["session_id"]
            token = encode_sid(sid)
            for _ in range(ck_spread.take()):
                publishes.append(js.publish(f"{prefix}.checkpoint.{token}", ck_payload))
            for _ in range(ev_spread.take()):
                publishes.append(js.publish(f"{prefix}.events.{token}.turn.ended", ev_payload))
            for seq in range(out_spread.take()):
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
                    js.publish(
                        f"{prefix}.outbound.{inbound['platform']}.{token}",
                        body,
                        headers={"Nats-Msg-Id": f"{sid}:{inbound['id']}:{seq}"},
                    )
                )
        await asyncio.gather(*publishes)
        await asyncio.gather(*(m.ack() for m in msgs))
    await nc.drain()


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

"""A minimal delivery adapter: consume turnstile's replies for one platform durably.

    python docs/examples/delivery_adapter.py --server nats://127.0.0.1:4333 --platform telegram

It binds a durable pull consumer (explicit ack) on the outbound stream, filtered to
``<prefix>.outbound.<platform>.>``, "delivers" each reply (here: prints it as one JSON line)
and acks it only after that. Stopped or killed, it resumes where it left off: the server
keeps the consumer's position, and a reply whose ack never arrived comes again after
``--ack-wait`` seconds, so delivery is at least once. Use ``Nats-Msg-Id`` (``<session_id>:
<turn_id>:<seq>``) to drop the rare redelivery on your side. Needs only nats-py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy


def stream_name(prefix: str) -> str:
    return prefix.upper().replace(".", "_").replace("-", "_") + "_OUTBOUND"


async def deliver(reply: dict[str, Any], msg_id: str | None) -> None:
    """Hand the reply to the platform. Here: one JSON line on stdout."""
    print(json.dumps({"msg_id": msg_id, "session_id": reply["session_id"], "seq": reply["seq"],
                      "reply_to": reply["reply_to"], "text": reply["text"], "objects": reply["objects"]}),
          flush=True)


async def next_batch(sub: Any, batch: int) -> list[Any]:
    """Up to ``batch`` replies; [] when none came within a second. nats-py raises its own TimeoutError,
    or asyncio's when its first no-wait pull took the whole second (a loaded machine): catch both."""
    try:
        return list(await sub.fetch(batch, timeout=1.0))
    except (NatsTimeout, asyncio.TimeoutError):
        return []  # nothing new; ask again (a fresh pull also survives a server restart)


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    nc = await nats.connect(args.server)
    js = nc.jetstream()
    subject = f"{args.prefix}.outbound.{args.platform}.>"
    config = ConsumerConfig(
        durable_name=args.durable, filter_subject=subject, ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.NEW if args.only_new else DeliverPolicy.ALL,
        ack_wait=args.ack_wait, max_ack_pending=args.batch * 4,
    )
    sub = await js.pull_subscribe(subject, durable=args.durable, stream=stream_name(args.prefix), config=config)
    print(f"delivering {subject} as {args.durable}", file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            for msg in await next_batch(sub, args.batch):
                await deliver(json.loads(msg.data), (msg.headers or {}).get("Nats-Msg-Id"))
                await msg.ack()  # only after delivery: a crash before this redelivers it
    finally:
        await nc.close()  # the durable consumer stays on the server with its position
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="nats://127.0.0.1:4333")
    parser.add_argument("--prefix", default="turnstile")
    parser.add_argument("--platform", required=True, help="deliver this platform's replies")
    parser.add_argument("--durable", default=None, help="consumer name (default: deliver-<platform>)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--ack-wait", type=float, default=30.0, help="seconds before an unacked reply comes again")
    parser.add_argument("--only-new", action="store_true", help="on first start, skip replies already stored")
    args = parser.parse_args()
    args.durable = args.durable or f"deliver-{args.platform}"
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench.publish_path --base DIR``: the client CPU of one turn's publishes and acks, this
checkout's publisher against another checkout's (e.g. main), in one process.

One nats-server (temporary store), two connections; each side gets the ``Publisher`` and
``CheckpointChain`` of its own tree (``consumers/publisher.py`` and ``consumers/checkpoints.py``
loaded from ``DIR`` under other module names) and runs the same turn shape as a plain message
of ``bench.hotpath``: checkpoint 1 (fenced) → ``turn.started`` → ``session.updated`` (unwatched)
→ checkpoint 2 (fenced on 1, its ack awaited) → the reply (``Nats-Msg-Id``, after checkpoint 2's
ack) → ``usage`` → ``turn.ended`` → ``session.updated`` → the item's acks awaited; ``--sessions``
sessions concurrently. Rounds alternate the two sides (ABBA), so load from other processes falls
on both alike; the figure is process CPU (``time.process_time``) per turn, medians and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
import types
import uuid
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from consumers import checkpoints as this_checkpoints
from consumers import publisher as this_publisher
from consumers.nats_server import NatsServer
from schemas.subjects import Subjects
from schemas.wire import OutboundReply


def _load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Side:
    """One tree's publisher and a checkpoint chain per session."""

    def __init__(self, label: str, publisher_mod: Any, checkpoints_mod: Any, nc: Client, subjects: Subjects,
                 sessions: int) -> None:
        self.label = label
        self.pub = publisher_mod.Publisher(nc, nc.jetstream(), subjects)
        self.chains = {f"s{i}": checkpoints_mod.CheckpointChain(f"s{i}", self.pub) for i in range(sessions)}

    async def turn(self, sid: str, n: int) -> None:
        chain = self.chains[sid]
        pub = self.pub
        acks = [await pub.emit(sid, "turn.started", {"turn_id": f"t{n}", "mode": "conversation"})]
        await chain.publish(b'{"checkpoint":"' + b"u" * 1200 + b'"}')
        await pub.emit_unwatched(sid, "session.updated", {"session_id": sid, "status": "active"})
        await chain.publish(b'{"checkpoint":"' + b"a" * 1500 + b'"}')
        await chain.settle()  # the reply waits for the checkpoint that holds it
        reply = OutboundReply(session_id=sid, generation=0, turn_id=f"t{n}", seq=0, reply_to=f"m{n}", text="echo")
        acks.append(await pub.outbound("bench", reply))
        acks.append(await pub.emit(sid, "usage", {"input": 10, "output": 3}))
        acks.append(await pub.emit(sid, "turn.ended", {"turn_id": f"t{n}", "outcome": "replied"}))
        await pub.emit_unwatched(sid, "session.updated", {"session_id": sid, "status": "idle"})
        assert await pub.settle(acks)

    async def round(self, turns: int) -> float:
        async def serve(sid: str) -> None:
            for n in range(turns // len(self.chains)):
                await self.turn(sid, n)

        started = time.process_time()
        await asyncio.gather(*(serve(sid) for sid in self.chains))
        return (time.process_time() - started) / turns * 1e6


async def run(base: Path, rounds: int, turns: int, sessions: int) -> dict[str, list[float]]:
    base_pub = _load(base / "consumers" / "publisher.py", "base_consumers_publisher")
    # A chain that imports from its publisher module gets its own tree's (while it loads).
    saved = sys.modules["consumers.publisher"]
    sys.modules["consumers.publisher"] = base_pub
    try:
        base_chk = _load(base / "consumers" / "checkpoints.py", "base_consumers_checkpoints")
    finally:
        sys.modules["consumers.publisher"] = saved
    out: dict[str, list[float]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "nats")
        await server.start()
        conns: list[Client] = []
        try:
            sides = {}
            for label, pmod, cmod in (("base", base_pub, base_chk), ("this", this_publisher, this_checkpoints)):
                nc = await nats.connect(server.url)
                conns.append(nc)
                subjects = Subjects(prefix=f"pp{uuid.uuid4().hex[:6]}")
                for spec in subjects.streams():
                    await nc.jetstream().add_stream(name=spec.name, subjects=list(spec.subjects))
                sides[label] = Side(label, pmod, cmod, nc, subjects, sessions)
            for side in sides.values():
                await side.round(turns)  # warm-up
            for r in range(rounds):
                order = ("base", "this") if r % 2 == 0 else ("this", "base")
                for label in order:
                    out[label].append(await sides[label].round(turns))
        finally:
            for nc in conns:
                await nc.close()
            await server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. /work/main)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--turns", type=int, default=400, help="turns per round")
    parser.add_argument("--sessions", type=int, default=10)
    args = parser.parse_args()
    out = asyncio.run(run(args.base, args.rounds, args.turns, args.sessions))
    for label in ("base", "this"):
        print(f"{label}: client CPU µs/turn median {statistics.median(out[label]):.0f}; rounds "
              f"{[round(x) for x in out[label]]}")
    print(f"this/base: {statistics.median(out['this']) / statistics.median(out['base']):.3f}")


if __name__ == "__main__":
    main()

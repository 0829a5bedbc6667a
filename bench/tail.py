"""``python -m bench.tail``: one turnstile load row (drain, then paced) and where its slow paced replies lie.

The load phase's own scenario (``bench.scenarios.turnstile_load``, the ``full`` profile's sizes by
default: a 1,500-message backlog, or one message per session when there are more sessions, then
500 paced messages at 50 msg/s) on its own nats-server, repeated ``--runs`` times, e.g.
``python -m bench.tail --sessions 100 --store sqlite --runs 3``. Per run: paced p50/p99/max, the
10 slowest replies as ``[sent s after the paced phase's first publish, latency ms]``, and the p99 and
max of the messages sent in the first second against the rest (a stall right after the drain
shows there). ``--json PATH`` keeps every run's row, each paced message's send offset and latency
included (``paced.extra.messages``). Used to find and check the paced tail (bench/README.md,
"paced tail latency").
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import orjson

from bench.common import ROOT, LatencyStats, open_nats_server
from bench.profiles import PROFILES
from bench.scenarios import BenchContext, turnstile_load

EARLY_S = 1.0  # "right after the drain": messages sent in the paced phase's first second
SLOW_ACK_MS = 25.0  # an inbound publish acked slower than this: the nats-server's store (its fsync) stalled


def summary(row: dict[str, Any]) -> str:
    """One line: paced p50/p99/max, the early and late split, the slowest replies."""
    paced = row.get("paced")
    if not paced:
        return f"error: {row.get('error', '?')}"
    lat = paced["latency"]
    msgs = paced["extra"]["messages"]
    early = LatencyStats.of([ms / 1000 for sent, ms, _ in msgs if sent < EARLY_S])
    late = LatencyStats.of([ms / 1000 for sent, ms, _ in msgs if sent >= EARLY_S])
    acks = sorted(a for _, _, a in msgs)
    slow_acks = sum(1 for a in acks if a > SLOW_ACK_MS)
    slow = " ".join(f"{s:.2f}s:{ms:.0f}(ack {a:.0f})" for s, ms, a in paced["extra"]["slowest"])
    return (
        f"drain {row['drain']['msgs_per_s']:.0f} msg/s; paced p50 {lat['p50_ms']:.2f} p99 {lat['p99_ms']:.1f} "
        f"max {lat['max_ms']:.1f} ms; first {EARLY_S:g} s p99/max {early.p99_ms:.1f}/{early.max_ms:.1f}, "
        f"rest {late.p99_ms:.1f}/{late.max_ms:.1f}; worker CPU {paced['worker_cpu_us_per_msg']:.0f} µs/msg, "
        f"writes {paced['extra']['worker_written_bytes_per_msg'] / 1024:.0f} KiB/msg; inbound publish acks "
        f"p99 {acks[int(0.99 * (len(acks) - 1))]:.1f} max {acks[-1]:.1f} ms, {slow_acks} over {SLOW_ACK_MS:g} ms; slowest [sent s:ms] {slow}"
    )


async def run(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    server, server_meter = await open_nats_server(work)
    nc = await nats.connect(server.url, max_reconnect_attempts=3)
    ctx = BenchContext(nc, server.url, server_meter, PROFILES[args.profile], work)
    rows = []
    try:
        for i in range(args.runs):
            t0 = time.monotonic()
            row = await turnstile_load(ctx, args.sessions, "plain", args.store)
            row["wall_s"] = time.monotonic() - t0
            rows.append(row)
            print(f"run {i + 1} {args.store} {args.sessions} sessions: {summary(row)}", flush=True)
    finally:
        await nc.close()
        await server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--json", type=Path, default=None, help="write every run's row here")
    args = parser.parse_args()
    work = ROOT / "var" / "bench" / f"tail-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        rows = asyncio.run(run(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()

"""``python -m bench.timeline``: where one message's wall time goes in turnstile at one session (or a few).

One nats-server and one service process (bench/profiled_service.py with the profiler off:
the unmodified ``turnstile run`` plus SQLAlchemy listeners that log each commit's wall time
and the tables it wrote). One session (``--sessions N``: N) has two first turns (``--turns``), then ``--messages`` plain messages
are published at ``--rate`` per second (far below capacity), to the sessions in turn. Only messages that ran alone are
summarised: answered before the next publish, the previous one answered before theirs (on a
loaded machine some are not). ``--db pg`` runs the service on a fresh PostgreSQL database
(127.0.0.1:5432, bench/pg.py) instead of a SQLite file. ``--worker floor`` runs bench/floor.py instead (NATS marks only:
its SQL commits are not logged); its checkpoints are ``--checkpoint-bytes`` each (default 2,600 B, a
turnstile checkpoint early in a session; the table's header gives turnstile's average over its run,
which grows ~0.5 kB a plain turn: pass it to compare the fenced round trips like for like).
``--marks`` adds the service's own marks on the serial path (bench/service_marks.py: the actor's
item, the user message's staging, the model turn, each checkpoint's publish and the waits for the
chain, socket writes, publish acks), shown in brackets (``[ck wait<] #2``).

Marks, all in ``time.time()`` of the same machine:

- ``publish``: the bench's publish call (``sent_at`` in the message): the origin;
- ``commit[tables]``: a service SQL commit (its log, written inside the service; the mark is
  the commit call, ``first write`` the transaction's first statement), numbered per message;
  ``committed[tables]``: the group committer's transaction returned (its commit's round trip
  ended; on PostgreSQL the server's fsync);
- ``inbound ack``, ``checkpoint #n``, ``event <type>``, ``reply``, ``typing``: the service's
  publishes as a core subscription of the bench sees them arrive at the nats-server (a copy
  delivered ~0.1 ms after the server routed it).

Per mark: median and p90 offset from the publish over the messages, and in how many messages it
occurred. The step between consecutive marks is where the time went (a JetStream publish's
round trip ends when the next mark that waited for its ack appears). Writes
``var/bench/timeline-<worker>-latest.json`` (the summary, and under ``per_message`` every summarised
message's own marks, to read one message's path in order) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import signal
import statistics
import time
import uuid
from bisect import bisect_right
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import orjson
from nats.aio.msg import Msg

from bench.baseline import baseline_settings
from bench.common import ROOT, Child, delete_streams, open_nats_server, wait_until
from bench.driver import Driver, Meters, message_plan, session_ids
from bench.shape import PublishShape, StreamShape
from bench.turnstile_load import READY_MARKER, READY_TIMEOUT_S, ServiceConfig, new_prefix, start_floor
from consumers.nats_flush import flush
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects

Mark = tuple[float, str]  # (time.time(), kind)


def nats_kind(prefix: str, subject: str) -> str | None:
    """The timeline kind of a core copy of a NATS message of this prefix (None: not a mark)."""
    if subject.startswith("$JS.ACK."):
        return "inbound ack"
    if not subject.startswith(prefix + "."):
        return None
    parts = subject[len(prefix) + 1 :].split(".")
    head = parts[0]
    if head == "checkpoint":
        return "checkpoint"
    if head == "events":
        return "event " + ".".join(parts[2:])
    if head == "outbound":
        return "reply"
    if head == "stream":
        return "typing"
    return None  # inbound (the origin comes from sent_at) and anything else


def commit_marks(commit_log: list[list[Any]]) -> list[Mark]:
    """``commit[tables]`` at each commit call, and ``committed[tables]`` when a group transaction's commit
    returned, from the service's log of (first write, commit, tables[, committed])."""
    marks: list[Mark] = []
    for entry in commit_log:
        name = "+".join(entry[2]) or "no writes"
        marks.append((float(entry[1]), f"commit[{name}]"))
        if len(entry) > 3:
            marks.append((float(entry[3]), f"committed[{name}]"))
    return marks


def per_message(origins: list[float], marks: list[Mark]) -> list[dict[str, float]]:
    """Each message's marks as offsets (ms) from its publish, numbered by kind (``checkpoint #2``).

    A mark belongs to the last message published before it (the rate keeps messages apart).
    """
    origins = sorted(origins)
    out: list[dict[str, float]] = [{} for _ in origins]
    seen: list[Counter[str]] = [Counter() for _ in origins]
    for at, kind in sorted(marks):
        i = bisect_right(origins, at) - 1
        if i < 0:
            continue
        seen[i][kind] += 1
        out[i][f"{kind} #{seen[i][kind]}"] = (at - origins[i]) * 1000
    return out


def isolated(origins: list[float], replies: list[float | None]) -> list[bool]:
    """Which messages ran alone: answered before the next publish, the previous one answered before
    this publish (so every mark between two publishes is this message's). Both lists by publish time."""
    keep = []
    for i, (origin, reply) in enumerate(zip(origins, replies, strict=True)):
        next_origin = origins[i + 1] if i + 1 < len(origins) else math.inf
        previous = replies[i - 1] if i else -math.inf
        keep.append(reply is not None and reply < next_origin and previous is not None and previous < origin)
    return keep


def summarise(messages: list[dict[str, float]], min_share: float = 0.2) -> list[dict[str, Any]]:
    """Per mark present in at least ``min_share`` of the messages, in the order marks come within a message.

    Order: mean rank of the mark within its message. Per mark: median and p90 offset from the
    publish (ms), share of messages, and ``step_ms``: the median, over messages, of the time
    since the previous mark in this order that the same message has (the time this step took).
    """
    offsets: dict[str, list[float]] = defaultdict(list)
    ranks: dict[str, list[int]] = defaultdict(list)
    for m in messages:
        for rank, name in enumerate(sorted(m, key=m.__getitem__)):
            offsets[name].append(m[name])
            ranks[name].append(rank)
    kept = [n for n in offsets if len(offsets[n]) / max(len(messages), 1) >= min_share]
    kept.sort(key=lambda n: statistics.fmean(ranks[n]))
    rows = []
    for i, name in enumerate(kept):
        steps = []
        for m in messages:
            if name not in m:
                continue
            prev = next((m[p] for p in reversed(kept[:i]) if p in m), 0.0)
            steps.append(m[name] - prev)
        values = sorted(offsets[name])
        rows.append({
            "mark": name,
            "median_ms": statistics.median(values),
            "p90_ms": values[min(len(values) - 1, int(0.9 * len(values)))],
            "step_ms": statistics.median(steps),
            "share": len(values) / max(len(messages), 1),
        })
    return rows


# The floor's checkpoint size here by default (``--worker floor``): a plain turnstile message's early in a
# session. Turnstile's checkpoints grow with the conversation (~0.5 kB a plain turn); pass
# ``--checkpoint-bytes`` their average over the run to compare round trips like for like.
FLOOR_CHECKPOINT_BYTES = 2600.0


def floor_shape(checkpoint_bytes: float) -> PublishShape:
    """The floor's publish shape: a plain turnstile message at one session (2 checkpoints, 5 events, 1 reply)."""
    return PublishShape(
        0,
        {"checkpoint": StreamShape(2.0, checkpoint_bytes), "events": StreamShape(5.0, 330.0),
         "outbound": StreamShape(1.0, 330.0)},
    )


async def measure(
    messages: int, rate: float, work: Path, worker: str = "turnstile", db: str = "sqlite", *,
    marks: bool = False, checkpoint_bytes: float = FLOOR_CHECKPOINT_BYTES, sessions: int = 1, turns: int = 2,
) -> dict[str, Any]:
    """One run; ``worker`` is ``turnstile`` (marks + the service's commit log) or ``floor`` (NATS marks only);
    ``db`` is the service's store (``sqlite`` | ``pg``); ``marks``: the service's own marks too
    (bench/service_marks.py); ``checkpoint_bytes``: the floor's checkpoint size; ``turns``: first turns per session."""
    if db == "pg":
        from bench.pg import fresh_database

        async with fresh_database("timeline") as name:
            return await _measure(messages, rate, work, worker, name, marks, checkpoint_bytes, sessions, turns)
    return await _measure(messages, rate, work, worker, None, marks, checkpoint_bytes, sessions, turns)


async def _measure(
    messages: int, rate: float, work: Path, worker: str, pg_database: str | None, with_marks: bool,
    checkpoint_bytes: float, sessions: int = 1, turns: int = 2,
) -> dict[str, Any]:
    from bench.scenarios import plain_text  # imports LangGraph (the bench extra): not needed by the pure helpers

    server, server_meter = await open_nats_server(work)
    nc = await nats.connect(server.url)
    tap = await nats.connect(server.url)
    prefix = new_prefix("tl")
    subjects = Subjects(prefix)
    js = nc.jetstream()
    settings = baseline_settings(server.url, prefix) if worker == "floor" else Settings(nats_url=server.url, prefix=prefix)
    await ensure_streams(js, settings, subjects)
    marks: list[Mark] = []
    sent: dict[str, float] = {}  # inbound id → sent_at
    replied: dict[str, float] = {}  # inbound id → first reply seen
    checkpoint_sizes: list[int] = []
    active = False

    async def on_msg(msg: Msg) -> None:
        now = time.time()
        if not active:
            return
        if msg.subject.startswith(prefix + ".inbound."):
            body = orjson.loads(msg.data)
            sent[body["id"]] = float(body["sent_at"])
            return
        kind = nats_kind(prefix, msg.subject)
        if kind is None:
            return
        marks.append((now, kind))
        if kind == "checkpoint":
            checkpoint_sizes.append(len(msg.data))
        if kind == "reply":
            replied.setdefault(orjson.loads(msg.data).get("reply_to"), now)

    for subject in (f"{prefix}.>", f"$JS.ACK.{subjects.inbound_stream}.>"):
        await tap.subscribe(subject, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=2**34)
    await flush(tap)
    log_path = work / "service.counters"
    if worker == "floor":
        floor_pg = None
        if pg_database is not None:  # the floor on the same PostgreSQL server (bench/floor_store.py)
            from bench.pg import pg_url

            floor_pg = pg_url(pg_database)
        child = await start_floor(
            server.url, prefix, orjson.dumps(floor_shape(checkpoint_bytes).as_dict()).decode(), work / "floor.log", 600,
            pg_url=floor_pg,
        )
        await nc.publish(f"{prefix}.bench.go", b"")
    else:
        extra: dict[str, str] = {}
        if pg_database is not None:
            from bench.pg import pg_url

            extra["TURNSTILE_DATABASE_URL"] = pg_url(pg_database, "postgresql+asyncpg")
        config = ServiceConfig(server.url, prefix, work / f"{prefix}.db", extra)
        env = {**config.env(), "BENCH_PROFILE_OUT": str(log_path), "BENCH_PROFILE_OFF": "1"}
        if with_marks:
            env["BENCH_MARKS"] = "1"
        child = Child(["-m", "bench.profiled_service"], env, work / "service.log")
    driver = Driver(nc, subjects, Meters(server_meter, server_meter))
    commit_log: list[list[Any]] = []
    service_marks: list[Mark] = []
    pg_trips: dict[str, int] = {}
    try:
        if worker != "floor":
            await child.wait_ready(READY_MARKER, READY_TIMEOUT_S)
        await driver.attach()
        sids = session_ids(uuid.uuid4().hex[:8], sessions)
        await driver.rounds(sids, turns, lambda r: "first turn", 60)
        if worker != "floor":
            os.kill(child.pid, signal.SIGUSR1)
        await asyncio.sleep(0.2)  # the signal handler has run (bounded; the window only needs to open before the first publish)
        active = True
        paced = await driver.paced(message_plan(sids, messages, plain_text), rate, sessions, 60)
        await asyncio.sleep(0.5)  # the last message's events and marks after its reply (a bound, not a wait for a result)
        await flush(tap)
        active = False
        if worker != "floor":
            os.kill(child.pid, signal.SIGUSR2)
            json_path = Path(str(log_path) + ".json")
            if not await wait_until(json_path.exists, 60, 0.1):
                raise RuntimeError("the service wrote no commit log")
            await asyncio.sleep(0.2)  # the file is written in one call; let it finish
            logged = orjson.loads(await asyncio.to_thread(json_path.read_bytes))
            commit_log = logged["commit_log"]
            service_marks = [(float(at), f"[{name}]") for at, name in logged.get("marks", [])]
            pg_trips = logged.get("pg_round_trips", {})
    finally:
        await child.stop()
        await driver.detach()
        await delete_streams(js, subjects)
        await tap.close()
        await nc.close()
        await server.stop()
    ids = sorted(sent, key=sent.__getitem__)
    origins = [sent[i] for i in ids]
    alone = isolated(origins, [replied.get(i) for i in ids])
    msgs = [m for m, keep in zip(per_message(origins, marks + commit_marks(commit_log) + service_marks), alone, strict=True) if keep]
    commit_durations = [(entry[1] - entry[0]) * 1000 for entry in commit_log]
    return {
        "worker": worker,
        "sessions": sessions,
        "checkpoint_bytes_mean": statistics.fmean(checkpoint_sizes) if checkpoint_sizes else None,
        "db": "pg" if pg_database is not None else "sqlite",
        "messages": messages,
        "rate_per_s": rate,
        "answered": paced.answered,
        "isolated": len(msgs),
        "reply_latency": paced.latency.as_dict(),
        "marks": summarise(msgs),
        "per_message": msgs,  # every summarised message's marks (ms from its publish), in publish order
        "sql_commits_per_msg": len(commit_log) / max(len(origins), 1) if commit_log else None,
        "sql_first_write_to_commit_ms_median": statistics.median(commit_durations) if commit_durations else None,
        # PostgreSQL round trips per message by kind (BEGIN, COMMIT, statement, executemany, prepare, ...)
        "pg_round_trips_per_msg": {k: v / max(len(origins), 1) for k, v in sorted(pg_trips.items())},
        "load_average": os.getloadavg(),
    }


def table(r: dict[str, Any]) -> str:
    lat = r["reply_latency"]
    sql = (
        f" {r['sql_commits_per_msg']:.2f} SQL commits/msg, first write → commit call median"
        f" {r['sql_first_write_to_commit_ms_median'] or float('nan'):.3f} ms;"
        if r["sql_commits_per_msg"] else ""
    )
    lines = [
        f"{r['worker']} ({r.get('db', 'sqlite')}), {r.get('sessions', 1)} session(s), {r['messages']} plain messages at {r['rate_per_s']:g}/s ({r['answered']} answered,"
        f" {r['isolated']} alone: summarised; driver reply latency p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms);"
        f"{sql} checkpoints {r['checkpoint_bytes_mean'] or 0:,.0f} B on average; load average {r['load_average'][0]:.1f}",
        f"{'mark':<44} {'median ms':>9} {'step ms':>8} {'p90 ms':>8} {'share':>6}",
    ]
    if r.get("pg_round_trips_per_msg"):
        trips = r["pg_round_trips_per_msg"]
        lines.insert(1, f"PostgreSQL round trips per message: {sum(trips.values()):.2f} ("
                     + ", ".join(f"{k} {v:.2f}" for k, v in trips.items()) + ")")
    lines += [
        f"{m['mark']:<44} {m['median_ms']:9.2f} {m['step_ms']:8.2f} {m['p90_ms']:8.2f} {m['share']:6.2f}" for m in r["marks"]
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--rate", type=float, default=5.0, help="messages per second (keep it far below capacity)")
    parser.add_argument("--worker", choices=["turnstile", "floor"], default="turnstile")
    parser.add_argument("--db", choices=["sqlite", "pg"], default="sqlite", help="the service's store (turnstile only)")
    parser.add_argument("--marks", action="store_true",
                        help="turnstile: add the service's own marks on the serial path (bench/service_marks.py)")
    parser.add_argument("--checkpoint-bytes", type=float, default=FLOOR_CHECKPOINT_BYTES,
                        help="floor: its checkpoint size (turnstile's grow with the conversation)")
    parser.add_argument("--sessions", type=int, default=1,
                        help="sessions the messages go to in turn, each after two first turns (the load phase's 100: "
                        "short checkpoints, every session loaded)")
    parser.add_argument("--turns", type=int, default=2,
                        help="first turns per session before the window (the load phase's 100-session drain leaves ~15: "
                        "turnstile's checkpoints grow ~0.5 kB a turn)")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench")
    args = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = args.out / f"work-timeline-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(asyncio.wait_for(measure(
            args.messages, args.rate, work, args.worker, args.db, marks=args.marks, checkpoint_bytes=args.checkpoint_bytes,
            sessions=args.sessions, turns=args.turns,
        ), 600))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["started_at"] = stamp
    (args.out / f"timeline-{args.worker}{'-pg' if args.db == 'pg' else ''}-latest.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(table(result), flush=True)


if __name__ == "__main__":
    main()

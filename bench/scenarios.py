"""The measured scenarios: each gets a fresh prefix (and database), runs, and cleans its streams up."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from bench.baseline import baseline_settings
from bench.common import (
    Child,
    LatencyStats,
    ProcessMeter,
    delete_streams,
    file_bytes,
    settled_stream_states,
    stream_states,
    wait_until,
)
from bench.driver import CheckpointBytesMetric, Driver, Meters, message_plan, session_ids
from bench.langgraph_nats_peer import peer_settings
from bench.pg import commits, database_bytes, fresh_database, pg_url
from bench.profiles import Profile
from bench.report import FLOOR_ENGINE, FLOOR_ENGINE_PG, FLOOR_PG, FLOORS, PEER, SHELL_OFF  # the rows' worker names
from bench.shape import PublishShape, StreamShape, measure_shape
from bench.turnstile_load import ServiceConfig, new_prefix, start_baseline, start_floor, start_peer, start_service
from consumers.nats_flush import flush
from consumers.nats_server import free_port
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects

# Used only when turnstile could not be measured, so baseline A still runs; flagged in the JSON.
FALLBACK_SHAPE = PublishShape(
    0,
    {
        "checkpoint": StreamShape(3.0, 2100.0),
        "events": StreamShape(3.0, 260.0),
        "outbound": StreamShape(1.0, 330.0),
    },
)
TOOL_NAME = "knowledge_search"


def plain_text(i: int) -> str:
    return f"hello {i}"


def tools_text(i: int) -> str:
    return (
        f'/tool {TOOL_NAME} {{"query": "bench {i}"}}\n'
        f'/tool {TOOL_NAME} {{"query": "second {i}"}}\n'
        f"hello {i}"
    )


TURN_TEXTS = {"plain": plain_text, "tools": tools_text}


@dataclass
class BenchContext:
    """What every scenario shares: the server, a client, the profile and a work directory."""

    nc: Client
    nats_url: str
    server_meter: ProcessMeter
    profile: Profile
    work: Path
    errors: list[str] = field(default_factory=list)

    @property
    def js(self) -> Any:
        return self.nc.jetstream()


def _phase_error(ctx: BenchContext, what: str, exc: BaseException) -> dict[str, Any]:
    text = f"{what}: {type(exc).__name__}: {exc}"
    ctx.errors.append(text)
    print(f"  !! {text.splitlines()[0]}", flush=True)
    return {"error": text}


async def turnstile_load(
    ctx: BenchContext, sessions: int, turn: str, store: str = "sqlite", *, shell_off: bool = False
) -> dict[str, Any]:
    """Drain a preloaded backlog, then paced open-loop load, on one fresh service process.

    ``store`` is ``sqlite`` (a temp file; worker ``turnstile``) or ``postgres`` (a fresh database
    on 127.0.0.1:5432; worker ``turnstile/pg``). ``shell_off`` (SQLite; worker ``turnstile-off``): the same
    service with its session records, inbox marks, KS-14 look-ups and metrics switched off — not a
    configuration, a measure of what those rules cost beside the ``turnstile`` row.
    """
    if store == "postgres":
        async with fresh_database("ts") as name:
            out = await _turnstile_load(ctx, sessions, turn, {"TURNSTILE_DATABASE_URL": pg_url(name, "postgresql+asyncpg")})
            await _count_commits(out, name)
            return out
    return await _turnstile_load(ctx, sessions, turn, None, shell_off=shell_off)


async def _turnstile_load(
    ctx: BenchContext, sessions: int, turn: str, db_env: dict[str, str] | None, *, shell_off: bool = False
) -> dict[str, Any]:
    p = ctx.profile
    prefix = new_prefix("ts")
    subjects = Subjects(prefix)
    await ensure_streams(ctx.js, Settings(nats_url=ctx.nats_url, prefix=prefix), subjects)
    sids = session_ids(uuid.uuid4().hex[:8], sessions)
    text = TURN_TEXTS[turn]
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    await driver.attach()
    port = free_port()
    counter = CheckpointBytesMetric(f"http://127.0.0.1:{port}/metrics", len(subjects.checkpoint(sids[0])))
    child: Child | None = None
    worker = "turnstile/pg" if db_env else SHELL_OFF if shell_off else "turnstile"
    out: dict[str, Any] = {"worker": worker, "turn": turn, "sessions": sessions}
    try:
        before = await stream_states(ctx.js, subjects)
        backlog = p.drain_count(sessions, turn)
        await driver.preload(message_plan(sids, backlog, text))
        config = ServiceConfig(ctx.nats_url, prefix, ctx.work / f"{prefix}.db", {**(db_env or {}), "TURNSTILE_HTTP_PORT": str(port)})
        child = await start_service(config, ctx.work / f"{prefix}.log", shell_off=shell_off)
        out["pid"] = child.pid
        driver.timer.meters = Meters(child.meter, ctx.server_meter)
        driver.open_window()
        drain = await driver.measure_drain(sessions, p.drain_timeout_s(backlog))
        # What the drain's last turns publish after their replies belongs to the drain, not the paced window.
        mid = await settled_stream_states(ctx.js, subjects)
        await flush(ctx.nc)
        seen_mid = await counter.snapshot()
        out["drain"] = drain.as_dict()
        out["drain_shape"] = measure_shape(before, mid, seen_mid).as_dict()  # the histogram counts from the start
        out["rss_bytes_after_drain"] = child.meter.rss_bytes()
        paced = await driver.paced(
            message_plan(sids, p.paced_count(sessions, turn), text), p.paced_rate_per_s, sessions, p.reply_timeout_s
        )
        after = await settled_stream_states(ctx.js, subjects)
        await flush(ctx.nc)
        seen = await counter.snapshot()
        out["paced"] = paced.as_dict()
        out["paced_shape"] = measure_shape(mid, after, (seen[0] - seen_mid[0], seen[1] - seen_mid[1])).as_dict()
        out["rss_bytes"] = child.meter.rss_bytes()
    except Exception as exc:
        out.update(_phase_error(ctx, f"{worker} {turn} at {sessions} sessions", exc))
        if child is not None:
            out["log_tail"] = child.log_text()[-3000:]
    finally:
        if child is not None:
            await child.stop()
        await driver.detach()
        await delete_streams(ctx.js, subjects)
    return out


async def baseline_load(
    ctx: BenchContext, sessions: int, drain_shape: PublishShape, paced_shape: PublishShape, label: str,
    worker: str = "baseline",
) -> dict[str, Any]:
    """Baseline A (or one of the guarantee floor's workers, ``FLOORS``: ``floor``, ``floor+engine`` running
    turnstile's turn engine, and both on PostgreSQL, ``floor/pg`` and ``floor+engine/pg``, in a fresh
    database each) with turnstile's measured shapes: the same drain and paced phases."""
    p = ctx.profile
    floor = worker in FLOORS
    engine = worker in (FLOOR_ENGINE, FLOOR_ENGINE_PG)
    on_pg = worker in (FLOOR_PG, FLOOR_ENGINE_PG)
    prefix = new_prefix(("fe" if engine else "fl") if floor else "bl")
    subjects = Subjects(prefix)
    await ensure_streams(ctx.js, baseline_settings(ctx.nats_url, prefix), subjects)
    sids = session_ids(uuid.uuid4().hex[:8], sessions)
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    await driver.attach()
    out: dict[str, Any] = {"worker": worker, "turn": label, "sessions": sessions}
    child: Child | None = None
    max_s = p.reply_timeout_s * 3
    try:
        async with contextlib.AsyncExitStack() as stack:
            database = await stack.enter_async_context(fresh_database("floor")) if on_pg else None
            start = (
                functools.partial(start_floor, engine=engine, pg_url=pg_url(database) if database else None)
                if floor else start_baseline
            )
            before = await stream_states(ctx.js, subjects)
            # A longer backlog than turnstile's: the baseline drains it in a fraction of a second. The floor
            # running the engine drains turnstile's: its transcripts, and so its snapshots, grow as turnstile's do.
            backlog = p.drain_count(sessions, label)
            if not engine:
                backlog = max(backlog, p.baseline_min_drain)
            await driver.preload(message_plan(sids, backlog, TURN_TEXTS[label]))
            child = await start(
                ctx.nats_url, prefix, orjson.dumps(drain_shape.as_dict()).decode(), ctx.work / f"{prefix}-drain.log", max_s
            )
            driver.timer.meters = Meters(child.meter, ctx.server_meter)
            driver.open_window()
            await ctx.nc.publish(f"{prefix}.bench.go", b"")
            out["drain"] = (await driver.measure_drain(sessions, p.drain_timeout_s(backlog))).as_dict()
            mid = await settled_stream_states(ctx.js, subjects)
            out["drain_shape"] = measure_shape(before, mid).as_dict()
            await child.stop()
            child = await start(
                ctx.nats_url, prefix, orjson.dumps(paced_shape.as_dict()).decode(), ctx.work / f"{prefix}-paced.log", max_s
            )
            driver.timer.meters = Meters(child.meter, ctx.server_meter)
            await ctx.nc.publish(f"{prefix}.bench.go", b"")
            paced = await driver.paced(
                message_plan(sids, p.paced_count(sessions, label), TURN_TEXTS[label]), p.paced_rate_per_s, sessions,
                p.reply_timeout_s,
            )
            out["paced"] = paced.as_dict()
            out["paced_shape"] = measure_shape(mid, await settled_stream_states(ctx.js, subjects)).as_dict()
            out["rss_bytes"] = child.meter.rss_bytes()
            if database is not None:
                await child.stop()
                child = None
                await _count_commits(out, database)
    except Exception as exc:
        out.update(_phase_error(ctx, f"{worker} at {sessions} sessions", exc))
        if child is not None:
            out["log_tail"] = child.log_text()[-3000:]
    finally:
        if child is not None:
            await child.stop()
        await driver.detach()
        await delete_streams(ctx.js, subjects)
    return out


async def _count_commits(out: dict[str, Any], database: str) -> None:
    """PostgreSQL commits of a finished row per message answered (drain + paced; set-up included)."""
    answered = (out.get("drain") or {}).get("answered", 0) + (out.get("paced") or {}).get("answered", 0)
    try:
        out["pg_commits_per_msg"] = await commits(database) / max(answered, 1)
    except Exception as exc:  # a figure missing, not a row lost
        out.setdefault("notes", []).append(f"commit count of {database}: {exc!r}")


async def peer_load(ctx: BenchContext, sessions: int) -> dict[str, Any]:
    """The fair peer (nats-py + LangGraph + PostgreSQL checkpointer): the same drain and paced phases."""
    p = ctx.profile
    prefix = new_prefix("lg")
    subjects = Subjects(prefix)
    await ensure_streams(ctx.js, peer_settings(ctx.nats_url, prefix), subjects)
    sids = session_ids(uuid.uuid4().hex[:8], sessions)
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    await driver.attach()
    out: dict[str, Any] = {"worker": PEER, "turn": "plain", "sessions": sessions}
    child: Child | None = None
    try:
        async with fresh_database("lg") as name:
            await driver.preload(message_plan(sids, p.drain_count(sessions), plain_text))
            child = await start_peer(ctx.nats_url, prefix, pg_url(name), ctx.work / f"{prefix}-peer.log", p.reply_timeout_s * 6)
            driver.timer.meters = Meters(child.meter, ctx.server_meter)
            driver.open_window()
            await ctx.nc.publish(f"{prefix}.bench.go", b"")
            out["drain"] = (await driver.measure_drain(sessions, p.drain_timeout_s(p.drain_count(sessions)))).as_dict()
            out["rss_bytes_after_drain"] = child.meter.rss_bytes()
            paced = await driver.paced(
                message_plan(sids, p.paced_count(sessions), plain_text), p.paced_rate_per_s, sessions, p.reply_timeout_s
            )
            out["paced"] = paced.as_dict()
            out["rss_bytes"] = child.meter.rss_bytes()
            await child.stop()
            child = None
            out["db_bytes"] = await database_bytes(name)
            await _count_commits(out, name)
    except Exception as exc:
        out.update(_phase_error(ctx, f"fair peer at {sessions} sessions", exc))
        if child is not None:
            out["log_tail"] = child.log_text()[-3000:]
    finally:
        if child is not None:
            await child.stop()
        await driver.detach()
        await delete_streams(ctx.js, subjects)
    return out


async def _run_peer(ctx: BenchContext, args: list[str], log_name: str, timeout_s: float) -> dict[str, Any]:
    child = Child(["-m", "bench.langgraph_peer", *args, "--timeout-s", str(ctx.profile.reply_timeout_s)], {}, ctx.work / log_name)
    try:
        await wait_until(lambda: child.proc.poll() is not None, timeout_s, 0.05)
    finally:
        await child.stop()
    for line in reversed(child.log_text().splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = orjson.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"LangGraph peer gave no result:\n{child.log_text()[-2000:]}")


async def langgraph_load(ctx: BenchContext, sessions: int) -> dict[str, Any]:
    p = ctx.profile
    out: dict[str, Any] = {"worker": "langgraph", "turn": "plain", "sessions": sessions}
    db = ctx.work / f"lg-{sessions}-{uuid.uuid4().hex[:6]}.db"
    try:
        res = await _run_peer(
            ctx,
            [
                "load",
                "--db", str(db),
                "--sessions", str(sessions),
                "--drain-messages", str(p.drain_count(sessions)),
                "--paced-messages", str(p.paced_count(sessions)),
                "--rate", str(p.paced_rate_per_s),
                "--concurrency", str(p.langgraph_concurrency),
            ],
            f"lg-load-{sessions}.log",
            p.reply_timeout_s * 4,
        )
        out.update(res)
    except Exception as exc:
        out.update(_phase_error(ctx, f"langgraph at {sessions} sessions", exc))
    return out


async def langgraph_turns20(ctx: BenchContext) -> dict[str, Any]:
    p = ctx.profile
    db = ctx.work / f"lg20-{uuid.uuid4().hex[:6]}.db"
    try:
        return await _run_peer(
            ctx,
            ["turns20", "--db", str(db), "--sessions", str(p.turns20_sessions), "--restore-sessions", str(p.restore_sessions)],
            "lg-turns20.log",
            p.reply_timeout_s * 4,
        )
    except Exception as exc:
        return _phase_error(ctx, "langgraph turns20", exc)


def sqlite_rows(db_path: Path) -> dict[str, int]:
    """Rows per table of a stopped service's SQLite file (what the SQL bytes are made of)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        return {n: int(conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]) for n in names}
    finally:
        conn.close()


def turns20_text(r: int) -> str:
    return f"turn {r}: hello from the bench"


async def _last_checkpoint_bytes(ctx: BenchContext, subjects: Subjects, session_id: str) -> int:
    try:
        msg = await ctx.js.get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(session_id))
    except NotFoundError:
        return 0
    return len(msg.data or b"")


async def turnstile_turns20(
    ctx: BenchContext, checkpoints_per_session: int | None = None, restore: bool = True
) -> dict[str, Any]:
    """Sessions × 20 turns: stored bytes per session; then (``restore``) a restart and cold-session first replies.

    ``checkpoints_per_session`` sets ``TURNSTILE_CHECKPOINTS_PER_SESSION`` (None: the service's default).
    """
    p = ctx.profile
    prefix = new_prefix("ts")
    subjects = Subjects(prefix)
    env = {"TURNSTILE_CHECKPOINTS_PER_SESSION": str(checkpoints_per_session)} if checkpoints_per_session else None
    config = ServiceConfig(ctx.nats_url, prefix, ctx.work / f"{prefix}-turns20.db", env)
    sids = session_ids(uuid.uuid4().hex[:8], p.turns20_sessions)
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    out: dict[str, Any] = {
        "sessions": len(sids),
        "checkpoints_per_session": checkpoints_per_session or Settings.model_fields["checkpoints_per_session"].default,
    }
    child: Child | None = None
    try:
        child = await start_service(config, ctx.work / f"{prefix}-turns20.log")
        await driver.attach()
        out["answered"] = await driver.rounds(sids, 20, turns20_text, p.reply_timeout_s)
        states = await stream_states(ctx.js, subjects)
        out["last_checkpoint_bytes"] = await _last_checkpoint_bytes(ctx, subjects, sids[0])
        await child.stop()
        child = None
        db_bytes = file_bytes(config.db_path)
        ck = states["checkpoint"]
        out.update(
            {
                "db_bytes": db_bytes,
                "checkpoint_stream_bytes": ck.bytes,
                "checkpoint_messages": ck.messages,
                "checkpoints_per_turn": ck.last_seq / max(out["answered"], 1),
                "checkpoint_bytes_per_transition": ck.bytes / max(ck.messages, 1),
                "bytes_per_session": (db_bytes + ck.bytes) / len(sids),
                "db_bytes_per_session": db_bytes / len(sids),
                "checkpoint_stream_bytes_per_session": ck.bytes / len(sids),
                "other_stream_bytes": {k: v.bytes for k, v in states.items() if k != "checkpoint"},
                "sql_rows": sqlite_rows(config.db_path),
            }
        )
        if not restore:
            return out
        # Restore: a new process on the same database and streams; first reply of cold sessions.
        t0 = time.perf_counter()
        child = await start_service(config, ctx.work / f"{prefix}-restart.log")
        out["restart_ready_s"] = time.perf_counter() - t0
        cold: list[float] = []
        warm: list[float] = []
        for sid in sids[: p.restore_sessions]:
            lat = await driver.one_turn(sid, "after restart", p.reply_timeout_s / 4)
            if lat is not None:
                cold.append(lat)
            lat = await driver.one_turn(sid, "again", p.reply_timeout_s / 4)
            if lat is not None:
                warm.append(lat)
        out["restore_cold_turn"] = LatencyStats.of(cold).as_dict()
        out["restore_warm_turn"] = LatencyStats.of(warm).as_dict()
        out["restore_overhead_ms"] = out["restore_cold_turn"]["p50_ms"] - out["restore_warm_turn"]["p50_ms"]
    except Exception as exc:
        out.update(_phase_error(ctx, "turnstile turns20/restore", exc))
        if child is not None:
            out["log_tail"] = child.log_text()[-3000:]
    finally:
        if child is not None:
            await child.stop()
        await driver.detach()
        await delete_streams(ctx.js, subjects)
    return out


async def turnstile_growth(ctx: BenchContext) -> dict[str, Any]:
    """One conversation far past the context window: the last checkpoint's size after every turn."""
    p = ctx.profile
    prefix = new_prefix("ts")
    subjects = Subjects(prefix)
    config = ServiceConfig(
        ctx.nats_url,
        prefix,
        ctx.work / f"{prefix}-growth.db",
        {"TURNSTILE_CONTEXT_WINDOW_TOKENS": str(p.growth_window_tokens)},
    )
    sid = f"bench-growth-{uuid.uuid4().hex[:8]}"
    filler = ("the quick brown fox jumps over the lazy dog " * 100)[: p.growth_text_chars]
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    out: dict[str, Any] = {"window_tokens": p.growth_window_tokens, "text_chars": p.growth_text_chars}
    child: Child | None = None
    sizes: list[int] = []
    latencies: list[float] = []
    try:
        child = await start_service(config, ctx.work / f"{prefix}-growth.log")
        await driver.attach()
        for t in range(p.growth_turns):
            lat = await driver.one_turn(sid, f"turn {t}: {filler}", p.reply_timeout_s / 4)
            if lat is None:
                raise RuntimeError(f"no reply to turn {t} within {p.reply_timeout_s / 4}s")
            latencies.append(lat)
            sizes.append(await _last_checkpoint_bytes(ctx, subjects, sid))
    except Exception as exc:
        out.update(_phase_error(ctx, "turnstile growth", exc))
        if child is not None:
            out["log_tail"] = child.log_text()[-3000:]
    finally:
        if child is not None:
            await child.stop()
        await driver.detach()
        await delete_streams(ctx.js, subjects)
    out["checkpoint_bytes_by_turn"] = sizes
    out["turn_latency"] = LatencyStats.of(latencies).as_dict()
    # ~4 characters per token, user text plus its echo per turn.
    out["conversation_tokens_estimate"] = len(sizes) * 2 * (p.growth_text_chars + 10) // 4
    return out


def shape_or_fallback(row: dict[str, Any], key: str) -> tuple[PublishShape, bool]:
    if key in row and row[key]["inbound"] > 0:
        return PublishShape.from_dict(row[key]), False
    return FALLBACK_SHAPE, True


async def settle(seconds: float = 0.5) -> None:
    """A short pause between phases so one phase's tail (fsyncs, compaction) does not bill the next."""
    await asyncio.sleep(seconds)

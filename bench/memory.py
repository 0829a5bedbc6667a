"""``python -m bench.memory``: resident memory of a bare service and after N sessions were touched.

One nats-server, one service process (bench/memory_service.py: the unmodified ``turnstile run``
with memory probes), SQLite by default (``--store postgres`` for a fresh PostgreSQL database).
Steps: RSS once the service is ready (no sessions), then ``--sessions`` sessions × 1 plain message
published at once and drained, RSS after the last reply (and read every 0.25 s from the first message
published: the peak during the drain); then an in-process dump (live objects by
type after ``gc.collect()``; the containers of 1,000 items or more, by owner; glibc's malloc totals and
the largest anonymous mappings; ``BENCH_HOLDERS_OF=<text>``: who holds the strings containing it),
what one live session actor holds alone (a referent walk from each of
20 actors, by attribute path; ``--midway`` also dumps at half the replies, ``--midway-at N`` once N replies are in); with ``--trace N`` also tracemalloc's top sites, by module and by
traceback — tracing slows the process, so read its RSS figures as traced).

The load phase of ``make bench`` measures the same figure (``rss_bytes_after_drain`` of the
10,000-session turnstile row); this is the quick way to rerun it alone (~1 min at 10,000).
``--migrated`` migrates the database before the service starts, as at a restart (the start-up
then imports no Alembic). Writes ``var/bench/memory-<store>-latest.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import orjson

from bench.common import ROOT, Child, ProcessMeter, open_nats_server, wait_until
from bench.driver import Driver, Meters, message_plan, session_ids
from bench.pg import fresh_database, pg_url
from bench.scenarios import plain_text
from bench.turnstile_load import READY_MARKER, READY_TIMEOUT_S, ServiceConfig, new_prefix
from consumers.settings import Settings
from consumers.streams import ensure_streams
from core.store.migrate import migrate_database
from schemas.subjects import Subjects


def _smaps(pid: int) -> dict[str, int]:
    """Resident bytes split as the kernel reports them (anonymous = the heap; the rest is mapped files)."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Anonymous", "Pss_File", "Pss_Anon"):
                out[key.lower() + "_bytes"] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


class _Course:
    """The service's RSS while the sessions are published and drained, read every ``every_s`` in a task:
    its peak (and how many replies were in then) and the samples (seconds, replies, RSS) — whether the
    figure after the drain is the burst's high-water mark or what is still live at the end."""

    def __init__(self, meter: ProcessMeter, replies: Callable[[], int], every_s: float = 0.25) -> None:
        self._meter = meter
        self._replies = replies
        self._every_s = every_s
        self.samples: list[tuple[float, int, int]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        t0 = time.monotonic()
        while True:
            self.samples.append((round(time.monotonic() - t0, 2), self._replies(), self._meter.rss_bytes()))
            await asyncio.sleep(self._every_s)

    def as_dict(self) -> dict[str, Any]:
        at, replies, rss = max(self.samples, key=lambda s: s[2], default=(0.0, 0, 0))
        return {"peak_rss_bytes": rss, "peak_at_replies": replies, "peak_at_s": at, "samples": self.samples}


def _read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


async def measure(
    sessions: int, work: Path, store: str, trace_frames: int, env: dict[str, str], midway: int | None = None,
    settle_s: float = 0.0, migrated: bool = False,
) -> dict[str, Any]:
    if store == "postgres":
        async with fresh_database("mem") as name:
            db = {"TURNSTILE_DATABASE_URL": pg_url(name, "postgresql+asyncpg")}
            return await _measure(sessions, work, {**db, **env}, trace_frames, midway, settle_s, migrated)
    return await _measure(sessions, work, env, trace_frames, midway, settle_s, migrated)


async def _measure(
    sessions: int, work: Path, env: dict[str, str], trace_frames: int, midway: int | None, settle_s: float,
    migrated: bool = False,
) -> dict[str, Any]:
    server, server_meter = await open_nats_server(work)
    nc = await nats.connect(server.url)
    prefix = new_prefix("mem")
    subjects = Subjects(prefix)
    await ensure_streams(nc.jetstream(), Settings(nats_url=server.url, prefix=prefix), subjects)
    dump = work / "memory"
    config = ServiceConfig(server.url, prefix, work / f"{prefix}.db", env)
    if migrated:  # a restart's start-up: the schema is at head already, nothing to migrate
        await migrate_database(config.env()["TURNSTILE_DATABASE_URL"])
    # Tracing stalls the event loop; a longer lease keeps the service from fencing itself meanwhile.
    lease = {"TURNSTILE_LEASE_TTL_S": "600"} if trace_frames else {}
    lease["TURNSTILE_HTTP_PORT"] = "0"  # other services may run on this machine
    child_env = {**config.env(), **lease, "BENCH_MEMORY_OUT": str(dump), "BENCH_TRACEMALLOC_FRAMES": str(trace_frames)}
    child = Child(["-m", "bench.memory_service"], child_env, work / "service.log")
    driver = Driver(nc, subjects, Meters(server_meter, server_meter))
    course: _Course | None = None
    out: dict[str, Any] = {"sessions": sessions, "env": env, "traced_frames": trace_frames, "migrated": migrated}
    try:
        await child.wait_ready(READY_MARKER, READY_TIMEOUT_S * (6 if trace_frames else 1))  # tracing slows start-up
        out["bare"] = {"rss_bytes": child.meter.rss_bytes(), **_smaps(child.pid)}
        await driver.attach()
        course = _Course(child.meter, lambda: len(driver.timer.got))
        course.start()  # from the first message published
        sids = session_ids(uuid.uuid4().hex[:8], sessions)
        t0 = time.perf_counter()
        await driver.preload(message_plan(sids, sessions, plain_text))
        driver.open_window()
        if midway is not None:  # a dump while the replies come in: what the sessions in flight hold
            await wait_until(lambda: len(driver.timer.got) >= midway, 120 + sessions * 0.05, 0.05)
            out["midway"] = {"replies": len(driver.timer.got), "rss_bytes": child.meter.rss_bytes()}
            child.proc.send_signal(signal.SIGUSR1)
            if not await wait_until(lambda: Path(str(dump) + ".done").exists(), 300, 0.1):
                raise RuntimeError("the service wrote no memory dump")
            out["midway"]["dump"] = _read_json(Path(str(dump) + ".json"))
            await asyncio.to_thread(Path(str(dump) + ".done").unlink)
        if not await wait_until(driver.timer.done, 120 + sessions * 0.05, 0.05):
            raise RuntimeError(f"only {len(driver.timer.got)}/{sessions} replies\n{child.log_text()[-2000:]}")
        out["drain_s"] = round(time.perf_counter() - t0, 2)
        await course.stop()
        out["course"] = course.as_dict()
        out["touched"] = {"rss_bytes": child.meter.rss_bytes(), **_smaps(child.pid)}
        if settle_s:  # let idle actors past the cap end before the dump (no fixed sleep in tests; a bench knob)
            await asyncio.sleep(settle_s)
            out["settled"] = {"after_s": settle_s, "rss_bytes": child.meter.rss_bytes(), **_smaps(child.pid)}
        child.proc.send_signal(signal.SIGUSR1)
        if not await wait_until(lambda: Path(str(dump) + ".done").exists(), 300, 0.1):
            raise RuntimeError("the service wrote no memory dump")
        out["after_gc"] = {"rss_bytes": child.meter.rss_bytes(), **_smaps(child.pid)}
        out["dump"] = _read_json(Path(str(dump) + ".json"))
    finally:
        if course is not None:
            await course.stop()
        await child.stop()
        await driver.detach()
        await nc.close()
        await server.stop()
    return out


def _mb(n: int | None) -> str:
    return f"{n / 1e6:7.1f}" if n else "      -"


def print_report(r: dict[str, Any]) -> None:
    print(f"sessions touched: {r['sessions']:,} (drained in {r.get('drain_s')} s); env {r['env']}"
          f"{'; database migrated before the start' if r.get('migrated') else ''}")
    for key in ("bare", "touched", "settled", "after_gc"):
        m = r.get(key) or {}
        print(f"  {key:9} RSS {_mb(m.get('rss_bytes'))} MB  anonymous {_mb(m.get('anonymous_bytes'))} MB")
    course = r.get("course") or {}
    if course.get("peak_rss_bytes"):
        print(f"  peak during the drain: RSS {_mb(course['peak_rss_bytes'])} MB at {course['peak_at_s']} s"
              f" ({course['peak_at_replies']:,} replies in); every ~2 s (s, replies, MB): "
              + ", ".join(f"{t:g}/{n:,}/{rss / 1e6:.0f}" for t, n, rss in course["samples"][::8]))
    bare, touched = (r.get("bare") or {}).get("rss_bytes"), (r.get("touched") or {}).get("rss_bytes")
    if bare and touched:
        print(f"  per touched session: {(touched - bare) / r['sessions']:,.0f} B")
    _print_dump(r.get("dump") or {})
    mid = r.get("midway")
    if mid:
        print(f"  midway ({mid['replies']:,} replies in): RSS {_mb(mid['rss_bytes'])} MB")
        _print_dump(mid["dump"])
    d = r.get("dump") or {}
    if "traced_bytes" in d:
        print(f"  traced (tracemalloc): {d['traced_bytes'] / 1e6:.1f} MB; by module:")
        for name, size in d["by_module"][:20]:
            print(f"    {size / 1e6:8.2f} MB  {name}")
        print("  by line:")
        for where, size, count in d["by_line"][:25]:
            print(f"    {size / 1e6:8.2f} MB {count:>9,}  {where}")


def _print_dump(d: dict[str, Any]) -> None:
    if d.get("rss_before_trim_bytes"):
        print(f"  in-process after gc: RSS {_mb(d['rss_before_trim_bytes'])} MB → after malloc_trim(0) {_mb(d['rss_after_trim_bytes'])} MB"
              f" ({d.get('malloc_trim_s', 0) * 1e3:.1f} ms)")
    for trims, seconds in d.get("heap_trims") or []:
        print(f"  the service's heap trims (consumers/heap_trim.py): {trims} calls, {seconds * 1e3:.1f} ms in all")
    mi = d.get("mallinfo") or {}
    if mi:
        print(f"  glibc malloc (all arenas): {mi['arena'] / 1e6:.1f} MB from the system, {mi['uordblks'] / 1e6:.1f} MB in use,"
              f" {mi['fordblks'] / 1e6:.1f} MB free inside; {mi['hblkhd'] / 1e6:.1f} MB in direct mmaps")
    for name, value in (d.get("pymalloc") or {}).items():
        print(f"  pymalloc {name}: {value / 1e6 if 'bytes' in name else value:,.1f}{' MB' if 'bytes' in name else ''}")
    cyc = d.get("cyclic_garbage") or {}
    if cyc:
        print(f"  cyclic garbage found by the dump's collection: {cyc['objects']:,} objects, {cyc['shallow_bytes'] / 1e6:.1f} MB shallow")
        for name, count, size in cyc.get("by_type", [])[:12]:
            print(f"    {size / 1e6:8.2f} MB {count:>9,}  {name}")
    print(f"  live gc objects: {d.get('gc_objects', 0):,}")
    for name, count, size in d.get("by_type", [])[:20]:
        print(f"    {size / 1e6:8.2f} MB {count:>9,}  {name}")
    _print_actors(d.get("actor_retained") or {})
    if d.get("anonymous_regions"):
        print("  largest anonymous mappings (name, virtual MB, resident MB):")
        for name, size, rss in d["anonymous_regions"][:12]:
            print(f"    {rss / 1e6:8.2f} MB of {size / 1e6:8.1f}  {name}")
    if d.get("big_containers"):
        print("  containers of 1,000 items or more (owner, type, items, shallow bytes):")
        for owner, kind, n, size in d["big_containers"]:
            print(f"    {size / 1e6:8.2f} MB {n:>9,}  {kind:12} {owner}")


def _print_actors(ar: dict[str, Any]) -> None:
    if not ar.get("sampled"):
        return
    print(f"  live session actors: {ar['actors']:,} ({ar.get('registered')} in the registry); each holds alone"
          f" ~{ar['bytes_per_actor']:,} B (shallow sizes, {ar['sampled']} sampled); by path:")
    for path, size in ar["by_path"][:20]:
        print(f"    {size:>10,} B  actor{path}")
    print("  by type:")
    for name, size in ar["by_type"][:12]:
        print(f"    {size:>10,} B  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--trace", type=int, default=0, metavar="FRAMES", help="tracemalloc frames (0: off)")
    ap.add_argument("--midway", action="store_true", help="also dump while half the replies are in")
    ap.add_argument("--midway-at", type=int, metavar="N", help="also dump once N replies are in")
    ap.add_argument("--settle-s", type=float, default=0.0, help="seconds to wait after the last reply before the dump")
    ap.add_argument("--migrated", action="store_true", help="migrate the database before the service starts (a restart)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra service environment")
    args = ap.parse_args()
    env = dict(e.split("=", 1) for e in args.env)
    midway = args.midway_at if args.midway_at is not None else args.sessions // 2 if args.midway else None
    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    try:
        result = asyncio.run(measure(
            args.sessions, work, args.store, args.trace, env, midway, args.settle_s, args.migrated
        ))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_report(result)
    out = ROOT / "var" / "bench" / f"memory-{args.store}-latest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()

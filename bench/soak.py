"""``python -m bench.soak``: a long run at low load — does the service's memory stay flat, and does the
cyclic collector keep collecting its older generations?

One nats-server and one unmodified ``turnstile run`` (SQLite) on temporary stores. ``--sessions`` sessions
have a first turn each; then paced messages, ``--rate`` a second, go to them in turn for ``--minutes``.
With more sessions than ``TURNSTILE_MAX_LOADED_SESSIONS`` (256) the service keeps unloading sessions to
load others, so evicted actors turn into garbage all the time: the reference cycles that only the middle
and old generations' collections free. Between messages the service collects while its loop is idle
(``consumers/idle_gc.py``); this run shows whether the older generations are still collected at a load
where the young count rarely reaches ``TURNSTILE_GC_THRESHOLD`` on its own.

Every ``--every`` seconds (an interval): the replies' p50 / p99 and, from the service's
``/metrics``, its resident memory (``process_resident_memory_bytes``), the collections of each generation
(``python_gc_collections_total``) and the live session actors. A line per interval, then a verdict: RSS over the second half as a least-squares slope (MB an
hour), and how many collections of each generation ran. At the end one full collection in the service (the
probes of bench/memory_service.py, which runs the unmodified service) counts the reference cycles that were
still waiting for an older generation's collection. Writes ``var/bench/soak-latest.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import nats
import orjson
from prometheus_client.parser import text_string_to_metric_families

from bench.common import ROOT, Child, open_nats_server, wait_until
from bench.driver import Driver, Meters, message_plan, session_ids
from bench.turnstile_load import READY_MARKER, READY_TIMEOUT_S, ServiceConfig, new_prefix
from consumers.nats_server import free_port
from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects

GENERATIONS = ("0", "1", "2")
REPLY_TIMEOUT_S = 60.0


def service_figures(metrics_text: str) -> dict[str, float]:
    """From a ``/metrics`` scrape: collections per generation (``gc0``…``gc2``), live actors, the process's RSS."""
    wanted = {"turnstile_active_actors": "actors", "process_resident_memory_bytes": "rss_bytes"}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "python_gc_collections_total" and sample.labels.get("generation") in GENERATIONS:
                out[f"gc{sample.labels['generation']}"] = sample.value
            elif sample.name in wanted:
                out[wanted[sample.name]] = sample.value
    return out


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``(seconds, value)`` points, per hour (0 with fewer than two distinct times)."""
    try:
        fit = statistics.linear_regression([t for t, _ in points], [v for _, v in points])
    except statistics.StatisticsError:  # fewer than two points, or all at one time
        return 0.0
    return fit.slope * 3600.0


def verdict(intervals: list[dict[str, Any]]) -> dict[str, Any]:
    """RSS over the run and over its second half (slope, MB an hour), and the collections each generation ran."""
    if not intervals:
        return {}
    half = intervals[len(intervals) // 2 :]
    first, last = intervals[0], intervals[-1]
    mb = 1024 * 1024
    return {
        "rss_mb_first": first["rss_bytes"] / mb,
        "rss_mb_last": last["rss_bytes"] / mb,
        "rss_mb_max": max(i["rss_bytes"] for i in intervals) / mb,
        "rss_mb_per_hour_second_half": slope_per_hour([(i["at_s"], i["rss_bytes"] / mb) for i in half]),
        "collections": {g: last.get(f"gc{g}", 0.0) - first.get(f"gc{g}", 0.0) for g in GENERATIONS},
        "answered": sum(i["answered"] for i in intervals),
        "sent": sum(i["sent"] for i in intervals),
    }


async def _scrape(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url)
    response.raise_for_status()
    return service_figures(response.text)


async def soak(sessions: int, rate: float, minutes: float, every_s: float, work: Path) -> dict[str, Any]:
    from bench.scenarios import plain_text  # imports LangGraph (the bench extra): not for the unit tests

    out: dict[str, Any] = {
        "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "sessions": sessions, "rate_per_s": rate, "minutes": minutes, "every_s": every_s, "intervals": [],
    }
    async with contextlib.AsyncExitStack() as stack:
        server, server_meter = await open_nats_server(work)
        stack.push_async_callback(server.stop)
        nc = await nats.connect(server.url, max_reconnect_attempts=3)
        stack.push_async_callback(nc.close)
        prefix = new_prefix("soak")
        subjects = Subjects(prefix)
        await ensure_streams(nc.jetstream(), Settings(nats_url=server.url, prefix=prefix), subjects)
        driver = Driver(nc, subjects, Meters(server_meter, server_meter))
        await driver.attach()
        stack.push_async_callback(driver.detach)
        port = free_port()
        config = ServiceConfig(server.url, prefix, work / "soak.db", {"TURNSTILE_HTTP_PORT": str(port)})
        dump = work / "memory"
        # The unmodified service under bench/memory_service.py, whose probes run only at the SIGUSR1 of the end.
        child = Child(["-m", "bench.memory_service"], {**config.env(), "BENCH_MEMORY_OUT": str(dump)},
                      work / "service.log")
        stack.push_async_callback(child.stop)
        await child.wait_ready(READY_MARKER, READY_TIMEOUT_S)
        driver.timer.meters = Meters(child.meter, server_meter)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        sids = session_ids(uuid.uuid4().hex[:8], sessions)
        await driver.preload(message_plan(sids, sessions, plain_text), open_window=True)
        first = await driver.measure_drain(sessions, REPLY_TIMEOUT_S + sessions * 0.025)
        out["first_turns"] = {"answered": first.answered, "msgs_per_s": first.msgs_per_s}
        per_interval = max(1, round(rate * every_s))
        start = time.monotonic()
        for k in range(max(1, math.ceil(minutes * 60 / every_s))):
            sent = k * per_interval
            plan = [(sids[(sent + i) % sessions], plain_text(sent + i)) for i in range(per_interval)]
            paced = await driver.paced(plan, rate, sessions, REPLY_TIMEOUT_S)
            row = {
                "at_s": round(time.monotonic() - start, 1),
                "sent": paced.sent, "answered": paced.answered,
                "p50_ms": paced.latency.p50_ms, "p99_ms": paced.latency.p99_ms,
                "worker_cpu_us_per_msg": paced.worker_cpu_us_per_msg,
                **await _scrape(metrics_url),  # the RSS too: the service's own process_resident_memory_bytes
            }
            out["intervals"].append(row)
            _say(_line(row))
        out["verdict"] = verdict(out["intervals"])
        out["end"] = await _final_dump(child, dump)
    return out


async def _final_dump(child: Child, dump: Path) -> dict[str, Any]:
    """At the end, one full collection in the service (bench/memory_service.py): the reference cycles that were
    waiting for an older generation's collection, and the RSS before and after glibc's ``malloc_trim``."""
    child.proc.send_signal(signal.SIGUSR1)
    done = Path(str(dump) + ".done")
    if not await wait_until(done.exists, 300, 0.1):
        raise RuntimeError("the service wrote no memory dump")
    data = orjson.loads(await asyncio.to_thread(Path(str(dump) + ".json").read_bytes))
    garbage = data["cyclic_garbage"]
    return {
        "cyclic_garbage_objects": garbage["objects"],
        "cyclic_garbage_shallow_bytes": garbage["shallow_bytes"],
        "cyclic_garbage_by_type": garbage["by_type"][:10],
        "gc_objects": data["gc_objects"],
        "rss_before_trim_bytes": data["rss_before_trim_bytes"],
        "rss_after_trim_bytes": data["rss_after_trim_bytes"],
        "bytes_per_actor": data["actor_retained"].get("bytes_per_actor"),
    }


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['at_s']:7.0f} s  answered {row['answered']}/{row['sent']}  p50 {row['p50_ms']:.2f} ms  "
        f"p99 {row['p99_ms']:.2f} ms  RSS {row['rss_bytes'] / 2**20:.1f} MB  actors {row.get('actors', 0):.0f}  "
        f"collections {row.get('gc0', 0):.0f} / {row.get('gc1', 0):.0f} / {row.get('gc2', 0):.0f}"
    )


def _say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=5.0, help="messages a second")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds an interval")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.rate <= 0 or args.minutes <= 0 or args.every <= 0:
        parser.error("--sessions, --rate, --minutes and --every must be positive")
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    try:
        result = asyncio.run(soak(args.sessions, args.rate, args.minutes, args.every, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    v = result.get("verdict", {})
    if v:
        _say(
            f"RSS {v['rss_mb_first']:.1f} → {v['rss_mb_last']:.1f} MB (max {v['rss_mb_max']:.1f}); second half "
            f"{v['rss_mb_per_hour_second_half']:+.1f} MB/h; collections of generations 0 / 1 / 2: "
            + " / ".join(f"{v['collections'][g]:.0f}" for g in GENERATIONS)
            + f"; answered {v['answered']}/{v['sent']}"
        )
    end = result.get("end")
    if end:
        _say(
            f"at the end, one full collection found {end['cyclic_garbage_objects']:,} objects in reference cycles "
            f"({end['cyclic_garbage_shallow_bytes'] / 2**20:.2f} MB shallow); RSS {end['rss_before_trim_bytes'] / 2**20:.1f} MB, "
            f"{end['rss_after_trim_bytes'] / 2**20:.1f} after malloc_trim; a loaded session's actor holds "
            f"{(end['bytes_per_actor'] or 0) / 1024:.0f} kB alone (a referent walk of 20 of them)"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "soak-latest.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    _say(f"JSON: {path}")
    return 0 if v and v["answered"] == v["sent"] else 1


if __name__ == "__main__":
    sys.exit(main())

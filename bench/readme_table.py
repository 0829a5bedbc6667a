"""``python -m bench.readme_table [var/bench/latest.json]``: the README's Performance table from one run's JSON.

So the table in README.md is pasted from the run that produced it, not retyped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from bench.report import _fmt, _get, _ratio, find, storage_summary

WORKERS = (
    ("turnstile", "turnstile (SQLite)"),
    ("turnstile/pg", "turnstile (PostgreSQL)"),
    ("baseline", "baseline A"),
    ("floor", "guarantee floor (baseline A + turnstile's ordering and durability)"),
    ("floor+engine", "guarantee floor running turnstile's turn engine"),
    ("turnstile-off", "turnstile (SQLite) without its records, inbox marks, KS-14 look-up, metrics (a measure)"),
    ("lg+nats/pg", "fair peer (nats-py + LangGraph + PostgreSQL)"),
    ("floor/pg", "guarantee floor on PostgreSQL"),
    ("floor+engine/pg", "guarantee floor running turnstile's turn engine, on PostgreSQL"),
    ("langgraph", "LangGraph + SQLite, in-process"),
)


def _cell(row: dict[str, Any] | None, base: dict[str, Any] | None) -> tuple[str, str, str]:
    rate = _get(row, "drain", "msgs_per_s")
    ratio = _ratio(rate, _get(base, "drain", "msgs_per_s"))
    drain = f"{_fmt(rate)}" + (f" ({ratio:.2f}×)" if ratio is not None and row is not base else "")
    lat = f"{_fmt(_get(row, 'paced', 'latency', 'p50_ms'), 1)} / {_fmt(_get(row, 'paced', 'latency', 'p99_ms'), 1)}"
    cpu = _fmt(_get(row, "drain", "worker_cpu_us_per_msg"))
    return drain, lat, cpu


def markdown(result: dict[str, Any]) -> str:
    """One row per (session count, worker): drain msg/s (× baseline A), paced p50 / p99 ms, CPU µs/msg, RSS MB."""
    rows = result["load"]
    lines = [
        "| sessions | worker | drain msg/s (× baseline A) | paced p50 / p99 ms | worker CPU µs/msg | RSS MB |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in result["profile"]["session_counts"]:
        base = find(rows, "baseline", "plain", s)
        for worker, label in WORKERS:
            row = find(rows, worker, "plain", s)
            if row is None:
                continue
            drain, lat, cpu = _cell(row, base)
            rss = row.get("rss_bytes")
            lines.append(f"| {s:,} | {label} | {drain} | {lat} | {cpu} | {_fmt(rss / 1e6 if rss else None)} |")
    out = ["\n".join(lines)]
    if result.get("turns20"):
        out.append(storage_summary(result["turns20"]))
    targets = result.get("targets") or []
    if targets:
        passed = sum(1 for t in targets if t["pass"])
        out.append(f"targets: {passed} of {len(targets)} PASS")
    return "\n\n".join(out)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("var/bench/latest.json")
    print(markdown(orjson.loads(path.read_bytes())))


if __name__ == "__main__":
    main()

"""``python -m bench.history [RUN.json ...]``: how often each target passed, over every full run on record.

One run's ratios move with the machine: baseline A itself drained 368 and then 508 msg/s at one session
in two consecutive runs of the same code. Issue 17 is done when its targets pass in two consecutive
full runs, or when it is shown which cannot be reached without breaking a guarantee. Both need more
than one pair: how often turnstile met a target, and how often the guarantee floor's workers (which
do only part of turnstile's required work, ``bench/floor.py``) met it in the same runs.

The runs read are every committed version of ``docs/bench-latest.json`` (the second run of each pair
whose figures went into README's Performance section), plus the JSON files named on the command line
(a pair not committed yet: ``var/bench/latest.json`` copied after each run). Runs of the quick profile,
runs without targets and a file seen twice (same ``started_at``) are left out. ``--since YYYY-MM-DD``
keeps the runs started that day or later.

Per target, for turnstile and for each floor the run measured beside it (``floor``, ``floor+engine``,
``turnstile-off``; the PostgreSQL floors beside the fair peer): ``met/runs`` and the median ratio.

``--tails`` adds the paced rows' shape per session count: each worker's paced p50 as a multiple of baseline
A's in the same run, and its own p99 / p50 (how far its tail sits above its middle), medians over the runs
that measured it. A p99 target (≤ 2.5× baseline A's p99) is the p50 ratio times the worker's spread over
baseline A's: this tells a p99 missed through a slow middle from one missed through a long tail.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = "docs/bench-latest.json"
# (column, the target's pass key, its ratio key): turnstile, then the floors a run measured beside it.
COLUMNS = (
    ("turnstile", "pass", "value"),
    ("floor", "floor_pass", "floor"),
    ("floor+engine", "engine_pass", "engine"),
    ("turnstile-off", "off_pass", "off"),
    ("floor/pg", "floor_pg_pass", "floor_pg"),
    ("floor+engine/pg", "engine_pg_pass", "engine_pg"),
)


@dataclass
class Tally:
    """One target over the runs: per column, whether each run met it and its ratio."""

    target: str
    met: dict[str, list[bool]] = field(default_factory=dict)
    ratios: dict[str, list[float]] = field(default_factory=dict)

    def add(self, target: dict[str, Any]) -> None:
        for column, pass_key, ratio_key in COLUMNS:
            if target.get(pass_key) is None:
                continue
            self.met.setdefault(column, []).append(bool(target[pass_key]))
            ratio = target.get(ratio_key)
            if isinstance(ratio, int | float):
                self.ratios.setdefault(column, []).append(float(ratio))

    def cell(self, column: str) -> str:
        met = self.met.get(column)
        if not met:
            return ""
        ratios = self.ratios.get(column)
        median = f" ({statistics.median(ratios):.2f})" if ratios else ""
        return f"{sum(met)}/{len(met)}{median}"


def committed_runs(repo: Path = ROOT, path: str = COMMITTED) -> list[dict[str, Any]]:
    """Every committed version of ``path`` in ``repo``, oldest first."""
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--reverse", "--format=%H", "--", path],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    runs = []
    for commit in log:
        shown = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
        if shown.returncode != 0:  # a commit that deleted the file: no version to read
            continue
        runs.append(orjson.loads(shown.stdout))
    return runs


def full_runs(runs: list[dict[str, Any]], since: str | None = None) -> list[dict[str, Any]]:
    """The full-profile runs with targets, each once, in the order given (``since``: started that day or later)."""
    seen: set[str] = set()
    kept = []
    for run in runs:
        started = str(run.get("started_at", ""))
        if (run.get("profile") or {}).get("name") != "full" or not run.get("targets") or started in seen:
            continue
        if since is not None and started[:10] < since:
            continue
        seen.add(started)
        kept.append(run)
    return kept


def tally(runs: list[dict[str, Any]]) -> list[Tally]:
    """Per target (in the newest run's order, then any only older runs had), what each column met."""
    by_name: dict[str, Tally] = {}
    for run in reversed(runs):
        for target in run["targets"]:
            by_name.setdefault(target["target"], Tally(target["target"]))
    for run in runs:
        for target in run["targets"]:
            by_name[target["target"]].add(target)
    return list(by_name.values())


def markdown(runs: list[dict[str, Any]], tallies: list[Tally]) -> str:
    """A table: per target, ``met/runs (median ratio)`` for turnstile and each floor measured beside it."""
    columns = [c for c, _, _ in COLUMNS if any(t.met.get(c) for t in tallies)]
    first, last = str(runs[0]["started_at"]), str(runs[-1]["started_at"])
    lines = [
        f"{len(runs)} full runs, {first} to {last}: runs that met each target / runs that measured it (median ratio)",
        "",
        "| target | " + " | ".join(columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for t in tallies:
        lines.append(f"| {t.target} | " + " | ".join(t.cell(c) for c in columns) + " |")
    return "\n".join(lines)


# The paced rows of ``--tails``: baseline A (its spread only), then the workers compared with it.
TAIL_WORKERS = ("turnstile", "floor", "floor+engine", "turnstile-off")


@dataclass
class Tails:
    """One session count's paced rows over the runs: per worker, its p50 over baseline A's and its p99 / p50."""

    sessions: int
    p50_ratio: dict[str, list[float]] = field(default_factory=dict)
    spread: dict[str, list[float]] = field(default_factory=dict)

    def cell(self, worker: str) -> str:
        spreads = self.spread.get(worker)
        if not spreads:
            return ""
        ratios = self.p50_ratio.get(worker)
        middle = f"p50 {statistics.median(ratios):.2f}× · " if ratios else ""
        return f"{middle}p99/p50 {statistics.median(spreads):.2f} ({len(spreads)})"


def _latency(row: dict[str, Any]) -> tuple[float, float] | None:
    latency = (row.get("paced") or {}).get("latency") or {}
    p50, p99 = latency.get("p50_ms"), latency.get("p99_ms")
    if not isinstance(p50, int | float) or not isinstance(p99, int | float) or p50 <= 0:
        return None
    return float(p50), float(p99)


def paced_tails(runs: list[dict[str, Any]]) -> list[Tails]:
    """Per session count (ascending), the plain turn's paced rows of every run beside baseline A's."""
    by_count: dict[int, Tails] = {}
    for run in runs:
        rows = {(r.get("worker"), r.get("sessions")): r for r in run.get("load", []) if r.get("turn") == "plain"}
        for (worker, sessions), row in rows.items():
            if worker not in ("baseline", *TAIL_WORKERS) or not isinstance(sessions, int):
                continue
            latency = _latency(row)
            if latency is None:
                continue
            tails = by_count.setdefault(sessions, Tails(sessions))
            tails.spread.setdefault(worker, []).append(latency[1] / latency[0])
            base = _latency(rows.get(("baseline", sessions)) or {})
            if worker != "baseline" and base is not None:
                tails.p50_ratio.setdefault(worker, []).append(latency[0] / base[0])
    return [by_count[n] for n in sorted(by_count)]


def tails_markdown(tails: list[Tails]) -> str:
    """A table: per session count, baseline A's p99 / p50, and each worker's p50 ratio and p99 / p50."""
    workers = [w for w in TAIL_WORKERS if any(t.spread.get(w) for t in tails)]
    lines = [
        "paced rows: p50 as a multiple of baseline A's, and p99 / p50 of the worker itself (medians; runs)",
        "",
        "| sessions | baseline A | " + " | ".join(workers) + " |",
        "| --- | --- |" + " --- |" * len(workers),
    ]
    for t in tails:
        lines.append(f"| {t.sessions:,} | {t.cell('baseline')} | " + " | ".join(t.cell(w) for w in workers) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="run JSON files not committed yet (after the committed ones)")
    parser.add_argument("--since", help="only runs started on this day (YYYY-MM-DD) or later")
    parser.add_argument("--tails", action="store_true", help="also the paced rows' p50 ratios and p99 / p50 spreads")
    args = parser.parse_args(argv)
    runs = committed_runs() + [orjson.loads(p.read_bytes()) for p in args.runs]
    kept = full_runs(runs, args.since)
    if not kept:
        print("no full run with targets", file=sys.stderr)
        return 1
    print(markdown(kept, tally(kept)))
    if args.tails:
        print()
        print(tails_markdown(paced_tails(kept)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

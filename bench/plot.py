"""One PNG: drain throughput and paced p99 latency against session count, per worker."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = (
    ("baseline", "plain", "baseline A (raw nats-py)", "tab:gray", "s", "--"),
    ("baseline", "tools", "baseline A, 2-tool shape", "tab:gray", "^", ":"),
    ("turnstile", "plain", "turnstile (1 reply)", "tab:blue", "o", "-"),
    ("turnstile", "tools", "turnstile (2 tool calls)", "tab:cyan", "D", "-"),
    ("langgraph", "plain", "LangGraph + SQLite", "tab:orange", "v", "-"),
)


def _points(rows: list[dict[str, Any]], worker: str, turn: str, *path: str) -> tuple[list[int], list[float]]:
    xs: list[int] = []
    ys: list[float] = []
    for row in sorted(rows, key=lambda r: r["sessions"]):
        if row["worker"] != worker or row["turn"] != turn:
            continue
        cur: Any = row
        for key in path:
            cur = cur.get(key) if isinstance(cur, dict) else None
        if isinstance(cur, (int, float)) and not math.isnan(cur) and cur > 0:
            xs.append(row["sessions"])
            ys.append(float(cur))
    return xs, ys


def draw(result: dict[str, Any], path: Path) -> Path:
    rows = result["load"]
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(12, 4.8))
    for worker, turn, label, color, marker, style in SERIES:
        xs, ys = _points(rows, worker, turn, "drain", "msgs_per_s")
        if xs:
            ax_t.plot(xs, ys, marker=marker, linestyle=style, color=color, label=label)
        xs, ys = _points(rows, worker, turn, "paced", "latency", "p99_ms")
        if xs:
            ax_l.plot(xs, ys, marker=marker, linestyle=style, color=color, label=label)
    counts = sorted({r["sessions"] for r in rows})
    rate = result["profile"]["paced_rate_per_s"]
    for ax in (ax_t, ax_l):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(counts)
        ax.set_xticklabels([f"{c:,}" for c in counts])
        ax.minorticks_off()
        ax.set_xlabel("sessions")
        ax.grid(True, which="major", alpha=0.3)
    ax_t.set_ylabel("messages (turns) per second")
    ax_t.set_title("saturated throughput (drain of a preloaded backlog)")
    ax_l.set_ylabel("p99 latency, ms (publish → reply)")
    ax_l.set_title(f"paced open-loop load, {rate:g} msg/s: p99 latency")
    ax_t.legend(fontsize=8, loc="best")
    fig.suptitle(f"turnstile bench — profile {result['profile']['name']}, {result['started_at']}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

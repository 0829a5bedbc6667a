"""One PNG: drain throughput and paced p99 latency against session count, per worker."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

SERIES = (
    ("baseline", "plain", "baseline A (raw nats-py)", "tab:gray", "s", "--"),
    ("baseline", "tools", "baseline A, 2-tool shape", "tab:gray", "^", ":"),
    ("floor", "plain", "guarantee floor (baseline A + ordering, fences, SQL)", "tab:green", "*", "--"),
    ("floor+engine", "plain", "guarantee floor + turnstile's turn engine", "tab:olive", "*", ":"),
    ("turnstile", "plain", "turnstile (1 reply)", "tab:blue", "o", "-"),
    ("turnstile-off", "plain", "turnstile, shell's rule-keeping parts off", "tab:brown", "o", ":"),
    ("turnstile/pg", "plain", "turnstile on PostgreSQL", "tab:purple", "P", "-"),
    ("turnstile", "tools", "turnstile (2 tool calls)", "tab:cyan", "D", "-"),
    ("langgraph", "plain", "LangGraph + SQLite (in-process)", "tab:orange", "v", "-"),
    ("lg+nats/pg", "plain", "nats-py + LangGraph + PostgreSQL (fair peer)", "tab:red", "X", "-"),
    ("floor/pg", "plain", "guarantee floor on PostgreSQL", "tab:pink", "*", "--"),
    ("floor+engine/pg", "plain", "guarantee floor + engine on PostgreSQL", "tab:pink", "*", ":"),
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


def _short(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:g}k" if v % 1000 == 0 else f"{v / 1000:.1f}k"
    if v >= 10:
        return f"{v:.0f}"
    return f"{v:.2g}"


def draw(result: dict[str, Any], path: Path) -> Path:
    rows = result["load"]
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(12, 4.8))
    for worker, turn, label, color, marker, style in SERIES:
        for ax, keys in ((ax_t, ("drain", "msgs_per_s")), (ax_l, ("paced", "latency", "p99_ms"))):
            xs, ys = _points(rows, worker, turn, *keys)
            if not xs:
                continue
            ax.plot(xs, ys, marker=marker, linestyle=style, color=color, label=label)
            for x, y in zip(xs, ys, strict=True):
                ax.annotate(_short(y), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7, color=color)
    counts = sorted({r["sessions"] for r in rows})
    rate = result["profile"]["paced_rate_per_s"]
    for ax in (ax_t, ax_l):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(counts)
        ax.set_xticklabels([f"{c:,}" for c in counts])
        ax.xaxis.set_minor_locator(LogLocator(subs=[]))
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _short(v)))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("sessions")
        ax.grid(True, which="major", alpha=0.3)
    ax_t.set_ylabel("messages (turns) per second")
    ax_t.set_title("saturated throughput, drain of a backlog (higher is better)", fontsize=10)
    ax_l.set_ylabel("p99 latency, ms (publish → reply)")
    ax_l.set_title(f"p99 latency at paced open-loop {rate:g} msg/s (lower is better)", fontsize=10)
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"turnstile bench — profile {result['profile']['name']}, {result['started_at']}", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    import sys

    import orjson

    source = Path(sys.argv[1] if len(sys.argv) > 1 else "var/bench/latest.json")
    print(draw(orjson.loads(source.read_bytes()), source.with_suffix(".png") if len(sys.argv) > 2 else source.parent / "latest.png"))

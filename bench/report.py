"""The results table, the issue-5 and issue-9 targets (pass/fail with numbers) and the JSON file."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

PEER = "lg+nats/pg"  # the fair peer (nats-py + LangGraph + PostgreSQL)
FLOOR_ENGINE = "floor+engine"  # the guarantee floor running turnstile's turn engine (bench/floor_engine.py)
SHELL_OFF = "turnstile-off"  # turnstile on SQLite with the rule-keeping parts of its shell off (bench/ablation.py)
FLOOR_PG = "floor/pg"  # the guarantee floor on PostgreSQL (bench/floor_store.py)
FLOOR_ENGINE_PG = "floor+engine/pg"  # the same running turnstile's turn engine
FLOORS = ("floor", FLOOR_ENGINE, FLOOR_PG, FLOOR_ENGINE_PG)  # bench/floor.py's workers


def _get(d: dict[str, Any] | None, *path: str) -> Any:
    cur: Any = d
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


def find(rows: list[dict[str, Any]], worker: str, turn: str, sessions: int) -> dict[str, Any] | None:
    for row in rows:
        if row["worker"] == worker and row["turn"] == turn and row["sessions"] == sessions:
            return row
    return None


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b is None or not b or (isinstance(a, float) and math.isnan(a)):
        return None
    return float(a) / float(b)


def _target(name: str, value: float | None, limit: float, higher_is_better: bool, detail: str) -> dict[str, Any]:
    ok = value is not None and (value >= limit if higher_is_better else value <= limit)
    return {"target": name, "value": value, "limit": limit, "pass": ok, "detail": detail}


def with_floor(
    target: dict[str, Any], ts_value: Any, fl_value: Any, bl_value: Any, higher_is_better: bool, key: str = "floor"
) -> dict[str, Any]:
    """Add the guarantee floor (bench/floor.py) beside a target judged against baseline A.

    ``floor``: the floor's own ratio to baseline A (the part of the target no correct
    implementation reaches if it misses the limit too); ``floor_pass``: whether it meets the
    limit; ``over_floor``: turnstile's ratio to the floor (what is left to win; 1.0 = at the floor).
    ``key="engine"`` adds the same three for the floor running turnstile's turn engine
    (``engine``, ``engine_pass``, ``over_engine``), and ``key="off"`` for turnstile with the rule-keeping
    parts of its shell switched off (``off``, ``off_pass``, ``over_off``: turnstile's ratio to it is what
    those rules cost). The target's pass/fail is unchanged: it stays judged against baseline A.
    On a PostgreSQL target judged against the fair peer, ``key="floor_pg"`` / ``"engine_pg"`` add the floor
    and the floor with the engine on PostgreSQL the same way (their ratios are then to the fair peer).
    """
    floor = _ratio(fl_value, bl_value)
    target[key] = floor
    target[f"{key}_pass"] = None if floor is None else (floor >= target["limit"] if higher_is_better else floor <= target["limit"])
    target[f"over_{key}"] = _ratio(ts_value, fl_value)
    return target


def floor_note(target: dict[str, Any]) -> str:
    """``; floor 0.45× baseline A (misses the limit too), turnstile 0.70× the floor`` (and the same for the
    floor with the engine, when it ran) or '' without a floor figure. A target judged against the fair
    peer says so (``target["against"]``)."""
    note = ""
    against = target.get("against", "baseline A")
    for key, name in (
        ("floor", "floor"), ("engine", FLOOR_ENGINE), ("off", SHELL_OFF), ("floor_pg", FLOOR_PG),
        ("engine_pg", FLOOR_ENGINE_PG),
    ):
        if key not in target:
            continue
        if target[key] is None:
            note += f"; {name}: no figure"
            continue
        verdict = "meets the limit" if target[f"{key}_pass"] else "misses the limit too"
        note += (
            f"; {name} {_fmt(target[key], 2)}× {against} ({verdict}),"
            f" turnstile {_fmt(target[f'over_{key}'], 2)}× the {name}"
        )
    return note


RSS_LIMIT_MB = 150.0


def evaluate_targets(result: dict[str, Any], phases: tuple[str, ...] = ("load", "turns20", "growth")) -> list[dict[str, Any]]:
    """Issue 17's targets (and issue 5's bounded checkpoint) of the phases run, each with its value and pass/fail."""
    rows = result["load"]
    counts = result["profile"]["session_counts"]
    targets: list[dict[str, Any]] = []
    for s in counts if "load" in phases else ():
        ts, bl = find(rows, "turnstile", "plain", s), find(rows, "baseline", "plain", s)
        fl = find(rows, "floor", "plain", s)
        fe = find(rows, FLOOR_ENGINE, "plain", s)
        so = find(rows, SHELL_OFF, "plain", s)
        for path, name, limit, higher, unit, digits in (
            (("drain", "msgs_per_s"), f"drain ≥ 0.8× baseline A @ {s} sessions", 0.8, True, "msg/s", 1),
            (("paced", "latency", "p50_ms"), f"paced p50 ≤ 2× baseline A @ {s} sessions", 2.0, False, "ms", 2),
            (("paced", "latency", "p99_ms"), f"paced p99 ≤ 2.5× baseline A @ {s} sessions", 2.5, False, "ms", 2),
            (("drain", "worker_cpu_us_per_msg"), f"worker CPU/msg ≤ 1.5× baseline A @ {s} sessions", 1.5, False,
             "µs/msg (drain)", 1),
        ):
            a, b = _get(ts, *path), _get(bl, *path)
            target = _target(name, _ratio(a, b), limit, higher, f"{_fmt(a, digits)} vs {_fmt(b, digits)} {unit}")
            if fl is not None:
                target["detail"] += f" (floor {_fmt(_get(fl, *path), digits)})"
                with_floor(target, a, _get(fl, *path), b, higher)
            if fe is not None:
                target["detail"] += f" (floor+engine {_fmt(_get(fe, *path), digits)})"
                with_floor(target, a, _get(fe, *path), b, higher, key="engine")
            if so is not None:
                target["detail"] += f" ({SHELL_OFF} {_fmt(_get(so, *path), digits)})"
                with_floor(target, a, _get(so, *path), b, higher, key="off")
            targets.append(target)
        fp = find(rows, PEER, "plain", s)
        pg_floors = [(key, find(rows, w, "plain", s)) for key, w in (("floor_pg", FLOOR_PG), ("engine_pg", FLOOR_ENGINE_PG))]
        for worker in ("turnstile/pg", "turnstile"):
            tw = find(rows, worker, "plain", s)
            store = "PostgreSQL" if worker.endswith("/pg") else "SQLite"
            for path, what, higher, unit, digits in (
                (("drain", "msgs_per_s"), "drain", True, "msg/s", 1),
                (("paced", "latency", "p50_ms"), "paced p50", False, "ms", 2),
                (("paced", "latency", "p99_ms"), "paced p99", False, "ms", 2),
            ):
                a, b = _get(tw, *path), _get(fp, *path)
                target = _target(f"turnstile ({store}) {what} ahead of the fair peer @ {s} sessions", _ratio(a, b), 1.0,
                                 higher, f"{_fmt(a, digits)} vs {_fmt(b, digits)} {unit}")
                # On PostgreSQL, the guarantee floor on PostgreSQL beside it: can a correct implementation be ahead?
                for key, row in pg_floors if store == "PostgreSQL" else ():
                    if row is not None:
                        target["against"] = "the fair peer"
                        target["detail"] += f" ({row['worker']} {_fmt(_get(row, *path), digits)})"
                        with_floor(target, a, _get(row, *path), b, higher, key=key)
                targets.append(target)
    top = max(counts)
    rss = _get(find(rows, "turnstile", "plain", top), "rss_bytes_after_drain")
    if "load" in phases:
        targets.append(
            _target(f"RSS with {top:,} sessions touched ≤ {RSS_LIMIT_MB:g} MB", rss / 1e6 if rss else None, RSS_LIMIT_MB,
                    False, "turnstile on SQLite after the drain (MB)")
        )
    ts20, lg20 = result.get("turns20", {}).get("turnstile"), result.get("turns20", {}).get("langgraph")
    a, b = _get(ts20, "bytes_per_session"), _get(lg20, "bytes_per_session")
    if "turns20" in phases:
        targets.append(_target(
            f"stored bytes/session after 20 turns ≤ ¼ LangGraph ({_fmt(_get(ts20, 'checkpoints_per_session'))} checkpoints kept)",
            _ratio(a, b), 0.25, False, f"{_fmt(a)} vs {_fmt(b)} B",
        ))
    growth = result.get("growth") or {}
    sizes = growth.get("checkpoint_bytes_by_turn") or []
    value = None
    detail = "no data"
    if len(sizes) >= 8:
        n = len(sizes)
        mid = sizes[n // 2 : 3 * n // 4]
        end = sizes[3 * n // 4 :]
        value = (sum(end) / len(end)) / (sum(mid) / len(mid)) if mid and sum(mid) else None
        detail = (
            f"last checkpoint {sizes[0]} B at turn 1, {max(sizes)} B max, {sizes[-1]} B at turn {n}; "
            f"~{growth.get('conversation_tokens_estimate')} tokens through a {growth.get('window_tokens')}-token window; "
            "value = mean size of the last quarter / third quarter"
        )
    if "growth" in phases:
        targets.append(_target("checkpoint size bounded past the context window", value, 1.10, False, detail))
    return targets


HOL_LIMIT = 2.0  # issue 9: unrelated sessions' latency during a big deletion ≤ 2× without


def hol_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 9: unrelated sessions' paced p50 and p99 with the subtree deletion / without it."""
    hol = result.get("hol") or {}
    deletion = _get(hol, "with", "deletion") or {}
    inside = deletion.get("inside_window")
    detail_tail = (
        f"deleting {_fmt(deletion.get('deleted'))} sessions took {_fmt(deletion.get('duration_s'), 2)} s,"
        f" {_fmt(inside * 100 if inside is not None else None)} % of it inside the paced window"
    )
    targets = []
    for q in ("p50_ms", "p99_ms"):
        a, b = _get(hol, "with", "latency", q), _get(hol, "without", "latency", q)
        value = _ratio(a, b)
        if deletion.get("error") or (inside is not None and inside < 0.99):
            value = None  # the deletion failed or did not overlap the measurement: no figure
        targets.append(
            _target(
                f"head-of-line: paced {q[:3]} of unrelated sessions during a {_fmt(hol.get('children'))}-child"
                f" delete ≤ {HOL_LIMIT:g}× without",
                value,
                HOL_LIMIT,
                False,
                f"{_fmt(a)} vs {_fmt(b)} ms; {detail_tail}",
            )
        )
    return targets


def hol_summary(hol: dict[str, Any]) -> str:
    """One line for the head-of-line phase."""
    if "with" not in hol:
        return f"error: {(hol.get('error') or 'no data').splitlines()[0][:150]}"
    w, wo = hol["with"], hol.get("without") or {}
    d = w.get("deletion") or {}
    during = w.get("latency_sent_during_deletion") or {}
    return (
        f"{hol['sessions']} unrelated sessions at {_fmt(hol['rate_per_s'])} msg/s (1 in {hol['subtree_every']} to the subtree):"
        f" p50/p99 {_fmt(_get(wo, 'latency', 'p50_ms'), 2)}/{_fmt(_get(wo, 'latency', 'p99_ms'), 2)} ms without,"
        f" {_fmt(_get(w, 'latency', 'p50_ms'), 2)}/{_fmt(_get(w, 'latency', 'p99_ms'), 2)} ms with the deletion"
        f" (sent during it: p99 {_fmt(during.get('p99_ms'), 2)} ms, max {_fmt(during.get('max_ms'), 2)} ms);"
        f" answered {w.get('answered')}/{w.get('sent')} and {wo.get('answered')}/{wo.get('sent')};"
        f" delete of {_fmt(d.get('deleted'))} sessions {_fmt(d.get('duration_s'), 2)} s"
        f"{' FAILED ' + str(d['error']) if d.get('error') else ''},"
        f" {_fmt((d.get('inside_window') or 0) * 100)} % inside a {_fmt(w.get('window_s'), 1)} s window;"
        f" subtree built in {_fmt(hol.get('build_s'), 1)} s ({hol.get('subtree_children')} children listed)"
        f"{_slowest_note(w)}"
    )


def _slowest_note(phase: dict[str, Any]) -> str:
    """Where the with-deletion phase's slowest reply was sent, against the deletion's start and end."""
    slow, d = phase.get("slowest") or [], phase.get("deletion") or {}
    if not slow:
        return ""
    sent, ms = max(slow, key=lambda s: s[1])
    return (
        f"; slowest {_fmt(ms)} ms, sent at +{sent:.2f} s (deletion +{_fmt(d.get('started_after_s'), 2)}"
        f" to +{_fmt(d.get('ended_after_s'), 2)} s)"
    )


def storage_rows(turns20: dict[str, Any]) -> list[dict[str, Any]]:
    """turnstile's 20-turn storage at each checkpoints-per-session setting measured, fewest first."""
    rows = [v for k, v in turns20.items() if k.startswith("turnstile") and v.get("bytes_per_session")]
    return sorted(rows, key=lambda r: r.get("checkpoints_per_session") or 0)


def storage_summary(turns20: dict[str, Any]) -> str:
    """Stored bytes per session after 20 turns by checkpoints kept, against LangGraph (issue 11 item 9)."""
    lg = _get(turns20, "langgraph", "bytes_per_session")
    parts = [
        f"{r.get('checkpoints_per_session')} kept: {_fmt(r['bytes_per_session'])} B"
        f" (SQL {_fmt(r.get('db_bytes_per_session'))} + checkpoints {_fmt(r.get('checkpoint_stream_bytes_per_session'))};"
        f" {_fmt(_ratio(r['bytes_per_session'], lg), 2)}× LangGraph)"
        for r in storage_rows(turns20)
    ]
    return f"stored bytes/session after 20 turns by checkpoints kept: {'; '.join(parts)}; LangGraph {_fmt(lg)} B"


def _fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        if math.isnan(x):
            return "—"
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.{digits}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _machine_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The machine during each row's paced window: steal and the other processes' CPU, in % of both CPUs
    (a row slower than its neighbours with more of either lost the machine, not its code)."""
    shares = [(r, _get(r, "paced", "extra", "machine")) for r in rows]
    shown = [f"{r['worker']} @ {r['sessions']:,} {m['steal_pct']:.1f}/{m['others_pct']:.1f}" for r, m in shares if m]
    return ["Paced window, steal/others % of the machine: " + ", ".join(shown)] if shown else []


def table(result: dict[str, Any]) -> str:
    """A plain-text table of every load row, the storage/restore figures and the targets."""
    lines = []
    head = (
        f"{'worker':<13} {'turn':<6} {'sessions':>8} | {'drain msg/s':>11} {'worker µs/msg':>13} {'nats µs/msg':>11}"
        f" | {'paced p50 ms':>12} {'p99 ms':>8} {'max ms':>8} {'answered':>9} | {'RSS MB':>7}"
    )
    if result["load"]:
        lines += [head, "-" * len(head)]
    for row in result["load"]:
        if "error" in row and "drain" not in row:
            lines.append(f"{row['worker']:<13} {row['turn']:<6} {row['sessions']:>8} | ERROR {row['error'].splitlines()[0][:90]}")
            continue
        d, p = row.get("drain") or {}, row.get("paced") or {}
        rss = row.get("rss_bytes")
        lines.append(
            f"{row['worker']:<13} {row['turn']:<6} {row['sessions']:>8} | {_fmt(d.get('msgs_per_s')):>11}"
            f" {_fmt(d.get('worker_cpu_us_per_msg')):>13} {_fmt(d.get('server_cpu_us_per_msg')):>11}"
            f" | {_fmt(_get(p, 'latency', 'p50_ms'), 2):>12} {_fmt(_get(p, 'latency', 'p99_ms'), 2):>8}"
            f" {_fmt(_get(p, 'latency', 'max_ms'), 2):>8} {str(p.get('answered', '—')) + '/' + str(p.get('sent', '—')):>9}"
            f" | {_fmt(rss / 1e6 if rss else None):>7}"
        )
    lines += _machine_lines(result["load"])
    pg = [r for r in result["load"] if r.get("pg_commits_per_msg") is not None]
    if pg:
        lines.append(
            "PostgreSQL commits per message answered (pg_stat_database, set-up included): "
            + ", ".join(f"{r['worker']} @ {r['sessions']:,} {r['pg_commits_per_msg']:.2f}" for r in pg)
        )
    lines.append("")
    ts20 = result.get("turns20", {}).get("turnstile") or {}
    lg20 = result.get("turns20", {}).get("langgraph") or {}
    if ts20 or lg20:
        lines.append(f"after 20 turns × {ts20.get('sessions', '—')} sessions:")
        lines.append(
            f"  turnstile: {_fmt(ts20.get('bytes_per_session'))} B/session (SQLite {_fmt(ts20.get('db_bytes_per_session'))}"
            f" + checkpoint stream), {_fmt(ts20.get('checkpoints_per_turn'))} checkpoints/turn,"
            f" {_fmt(ts20.get('checkpoint_bytes_per_transition'))} B/checkpoint (stored), last checkpoint {_fmt(ts20.get('last_checkpoint_bytes'))} B"
        )
        lines.append(
            f"  langgraph: {_fmt(lg20.get('bytes_per_session'))} B/session (SQLite), {_fmt(lg20.get('checkpoints_per_turn'))} checkpoints/turn,"
            f" {_fmt(lg20.get('checkpoint_blob_bytes_per_checkpoint'))} B/checkpoint blob, last checkpoint {_fmt(lg20.get('last_checkpoint_json_bytes'))} B (JSON)"
        )
        lines.append(
            f"restore (first reply of a cold session after restart, p50): turnstile {_fmt(_get(ts20, 'restore_cold_turn', 'p50_ms'), 2)} ms"
            f" vs warm {_fmt(_get(ts20, 'restore_warm_turn', 'p50_ms'), 2)} ms (restart to ready {_fmt(ts20.get('restart_ready_s'), 2)} s);"
            f" langgraph {_fmt(_get(lg20, 'restore_cold_turn', 'p50_ms'), 2)} ms vs warm {_fmt(_get(lg20, 'restore_warm_turn', 'p50_ms'), 2)} ms"
        )
    if any(k.startswith("turnstile_ck") for k in result.get("turns20", {})):
        lines.append(storage_summary(result["turns20"]))
    mem = result.get("memory") or {}
    if mem and result["load"]:
        lines.append(
            f"resident memory with {mem.get('sessions_touched')} sessions touched: turnstile {_fmt(mem.get('turnstile_rss_mb'))} MB,"
            f" baseline {_fmt(mem.get('baseline_rss_mb'))} MB, langgraph {_fmt(mem.get('langgraph_rss_mb'))} MB"
        )
    growth = result.get("growth") or {}
    sizes = growth.get("checkpoint_bytes_by_turn") or []
    if sizes:
        step = max(1, len(sizes) // 8)
        sample = ", ".join(f"t{i + 1}:{sizes[i]}" for i in range(0, len(sizes), step))
        lines.append(f"checkpoint bytes by turn (window {growth.get('window_tokens')} tokens): {sample}, t{len(sizes)}:{sizes[-1]}")
    if result.get("hol"):
        lines.append(f"head-of-line: {hol_summary(result['hol'])}")
    lines.append("")
    lines.append("targets (issues 17, 5 and 9, ratios measured in this run):")
    for t in result.get("targets", []):
        mark = "PASS" if t["pass"] else "FAIL"
        lines.append(f"  [{mark}] {t['target']}: {_fmt(t['value'], 2)} (limit {t['limit']}) — {t['detail']}{floor_note(t)}")
    if result.get("errors"):
        lines.append("")
        lines.append("errors:")
        lines += [f"  {e.splitlines()[0][:200]}" for e in result["errors"]]
    return "\n".join(lines)


def write_json(result: dict[str, Any], out_dir: Path, stamp: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    path = out_dir / f"{stamp}.json"
    path.write_bytes(data)
    (out_dir / "latest.json").write_bytes(data)
    return path

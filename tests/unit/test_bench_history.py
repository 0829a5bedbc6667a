"""bench/history.py: every committed full run's targets, tallied per target for turnstile and the floors."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson

from bench.history import committed_runs, full_runs, main, markdown, paced_tails, tails_markdown, tally

CPU = "worker CPU/msg ≤ 1.5× baseline A @ 100 sessions"
RSS = "RSS with 10,000 sessions touched ≤ 150 MB"


def _run(started: str, cpu: float, engine: float | None, profile: str = "full") -> dict[str, Any]:
    target: dict[str, Any] = {"target": CPU, "value": cpu, "limit": 1.5, "pass": cpu <= 1.5, "floor": 1.2,
                              "floor_pass": True}
    if engine is not None:  # older runs had no floor+engine row
        target.update(engine=engine, engine_pass=engine <= 1.5)
    return {"started_at": started, "profile": {"name": profile},
            "targets": [target, {"target": RSS, "value": 137.0, "pass": True}]}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _commit(repo: Path, run: dict[str, Any]) -> None:
    (repo / "docs").mkdir(exist_ok=True)
    (repo / "docs" / "bench-latest.json").write_bytes(orjson.dumps(run))
    _git(repo, "add", "docs/bench-latest.json")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", run["started_at"])


def test_committed_full_runs_are_tallied_per_target_and_floor(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, _run("2026-12-04 10:00:00 UTC", 1.8, None))
    _commit(tmp_path, _run("2026-12-05 10:00:00 UTC", 1.4, 1.6))
    _commit(tmp_path, _run("2026-12-05 11:00:00 UTC", 2.0, 1.7, profile="quick"))  # not a full run
    _commit(tmp_path, _run("2026-12-06 10:00:00 UTC", 1.6, 1.4))
    _commit(tmp_path, _run("2026-12-06 10:00:00 UTC", 1.0, 1.4))  # the same run again (edited): its first copy counts

    runs = committed_runs(tmp_path)
    assert len(runs) == 5
    kept = full_runs(runs)
    assert [r["started_at"][:10] for r in kept] == ["2026-12-04", "2026-12-05", "2026-12-06"]
    cpu, rss = tally(kept)
    assert (cpu.target, rss.target) == (CPU, RSS)
    assert cpu.met == {"turnstile": [False, True, False], "floor": [True, True, True], "floor+engine": [False, True]}
    assert cpu.cell("turnstile") == "1/3 (1.60)"
    assert cpu.cell("floor+engine") == "1/2 (1.50)"
    assert rss.cell("turnstile") == "3/3 (137.00)" and rss.cell("floor") == ""

    table = markdown(kept, [cpu, rss])
    assert "3 full runs, 2026-12-04 10:00:00 UTC to 2026-12-06 10:00:00 UTC" in table
    assert "| target | turnstile | floor | floor+engine |" in table  # no column no run measured
    assert f"| {CPU} | 1/3 (1.60) | 3/3 (1.20) | 1/2 (1.50) |" in table

    since = full_runs(runs, since="2026-12-05")
    assert [r["started_at"][:10] for r in since] == ["2026-12-05", "2026-12-06"]


def test_runs_not_committed_yet_join_the_committed_ones(tmp_path: Path, capsys: Any) -> None:
    extra = tmp_path / "run1.json"
    extra.write_bytes(orjson.dumps(_run("2099-01-01 00:00:00 UTC", 1.1, 1.2)))
    assert main(["--since", "2099-01-01", str(extra)]) == 0  # the repository's own runs are all older
    out = capsys.readouterr().out
    assert out.startswith("1 full runs, 2099-01-01 00:00:00 UTC to 2099-01-01 00:00:00 UTC")
    assert f"| {CPU} | 1/1 (1.10) | 1/1 (1.20) | 1/1 (1.20) |" in out
    assert "paced rows" not in out
    assert main(["--since", "2099-01-01", "--tails", str(extra)]) == 0
    assert "| sessions | baseline A |" in capsys.readouterr().out
    assert main(["--since", "2100-01-01"]) == 1


def _paced(worker: str, sessions: int, p50: float, p99: float) -> dict[str, Any]:
    return {"worker": worker, "turn": "plain", "sessions": sessions,
            "paced": {"latency": {"p50_ms": p50, "p99_ms": p99}}}


def test_paced_tails_split_a_p99_into_the_middle_and_the_tail() -> None:
    run1 = {"load": [
        _paced("baseline", 100, 2.0, 3.0), _paced("turnstile", 100, 6.0, 12.0), _paced("floor", 100, 4.0, 6.0),
        _paced("turnstile", 100, 1.0, 1.0) | {"turn": "tools"},  # another turn: not a plain row
        _paced("lg+nats/pg", 100, 9.0, 9.0),  # not a worker of the table
    ]}
    run2 = {"load": [
        _paced("baseline", 100, 4.0, 8.0), _paced("turnstile", 100, 8.0, 10.0),
        _paced("turnstile", 1, 5.0, 6.0),  # no baseline A row at 1 session: its spread only
        _paced("floor", 10_000, 0.0, 1.0),  # no p50: left out
    ]}
    t1, t100 = paced_tails([run1, run2])
    assert t1.sessions == 1 and t1.spread == {"turnstile": [1.2]} and t1.p50_ratio == {}
    assert t1.cell("turnstile") == "p99/p50 1.20 (1)"
    assert t100.spread == {"baseline": [1.5, 2.0], "turnstile": [2.0, 1.25], "floor": [1.5]}
    assert t100.p50_ratio == {"turnstile": [3.0, 2.0], "floor": [2.0]}
    assert t100.cell("turnstile") == "p50 2.50× · p99/p50 1.62 (2)"
    assert t100.cell("baseline") == "p99/p50 1.75 (2)" and t100.cell("floor+engine") == ""

    table = tails_markdown([t1, t100])
    assert "| sessions | baseline A | turnstile | floor |" in table  # no column for a worker never measured
    assert "| 100 | p99/p50 1.75 (2) | p50 2.50× · p99/p50 1.62 (2) | p50 2.00× · p99/p50 1.50 (1) |" in table

"""The bench's issue-17 targets and storage summary (bench/report.py: pure functions over a result dict)."""

from __future__ import annotations

from typing import Any

from bench.report import evaluate_targets, storage_summary


def _row(worker: str, sessions: int, rate: float, p50: float, p99: float, cpu: float, rss: float = 0.0) -> dict[str, Any]:
    return {
        "worker": worker,
        "turn": "plain",
        "sessions": sessions,
        "drain": {"msgs_per_s": rate, "worker_cpu_us_per_msg": cpu},
        "paced": {"latency": {"p50_ms": p50, "p99_ms": p99}},
        "rss_bytes_after_drain": rss,
    }


def _result() -> dict[str, Any]:
    return {
        "profile": {"session_counts": [100]},
        "load": [
            _row("turnstile", 100, 900.0, 5.0, 9.0, 1000.0, rss=120e6),
            _row("turnstile/pg", 100, 300.0, 30.0, 60.0, 2000.0),
            _row("baseline", 100, 1000.0, 3.0, 4.0, 700.0),
            _row("lg+nats/pg", 100, 400.0, 12.0, 40.0, 6000.0),
        ],
        "turns20": {
            "turnstile": {"bytes_per_session": 50_000.0, "checkpoints_per_session": 2},
            "turnstile_ck64": {"bytes_per_session": 600_000.0, "checkpoints_per_session": 64},
            "langgraph": {"bytes_per_session": 400_000.0},
        },
    }


def _by_name(targets: list[dict[str, Any]]) -> dict[str, bool]:
    return {t["target"]: t["pass"] for t in targets}


def test_each_issue_17_target_is_judged_against_its_own_limit() -> None:
    got = _by_name(evaluate_targets(_result(), ("load", "turns20")))
    assert got["drain ≥ 0.8× baseline A @ 100 sessions"] is True  # 0.9×
    assert got["paced p50 ≤ 2× baseline A @ 100 sessions"] is True  # 1.67×
    assert got["paced p99 ≤ 2.5× baseline A @ 100 sessions"] is True  # 2.25×
    assert got["worker CPU/msg ≤ 1.5× baseline A @ 100 sessions"] is True  # 1.43×
    assert got["RSS with 100 sessions touched ≤ 150 MB"] is True
    assert got["stored bytes/session after 20 turns ≤ ¼ LangGraph (2 checkpoints kept)"] is True  # 0.125×


def test_turnstile_must_be_ahead_of_the_fair_peer_on_each_store() -> None:
    got = _by_name(evaluate_targets(_result(), ("load",)))
    assert got["turnstile (SQLite) drain ahead of the fair peer @ 100 sessions"] is True
    assert got["turnstile (SQLite) paced p99 ahead of the fair peer @ 100 sessions"] is True
    assert got["turnstile (PostgreSQL) drain ahead of the fair peer @ 100 sessions"] is False  # 300 < 400 msg/s
    assert got["turnstile (PostgreSQL) paced p50 ahead of the fair peer @ 100 sessions"] is False  # 30 > 12 ms


def test_a_missing_row_fails_its_targets_instead_of_passing_them() -> None:
    result = _result()
    result["load"] = [r for r in result["load"] if r["worker"] != "lg+nats/pg"]
    got = _by_name(evaluate_targets(result, ("load",)))
    assert got["turnstile (SQLite) drain ahead of the fair peer @ 100 sessions"] is False


def test_only_the_targets_of_the_phases_run_are_judged() -> None:
    names = set(_by_name(evaluate_targets(_result(), ("turns20",))))
    assert names == {"stored bytes/session after 20 turns ≤ ¼ LangGraph (2 checkpoints kept)"}


def test_storage_summary_lists_every_checkpoints_kept_setting_against_langgraph() -> None:
    line = storage_summary(_result()["turns20"])
    assert line.index("2 kept: 50,000 B") < line.index("64 kept: 600,000 B")
    assert "0.12× LangGraph" in line and "1.50× LangGraph" in line

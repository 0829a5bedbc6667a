"""The bench's issue-17 targets and storage summary (bench/report.py: pure functions over a result dict)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.report import evaluate_targets, floor_note, storage_summary, with_floor


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


def _with_floor() -> dict[str, Any]:
    result = _result()
    result["load"].append(_row("floor", 100, 500.0, 4.0, 12.0, 900.0))
    return result


def _target_named(targets: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(t for t in targets if t["target"] == name)


def test_the_floor_is_printed_beside_each_baseline_target_but_does_not_judge_it() -> None:
    targets = evaluate_targets(_with_floor(), ("load",))
    drain = _target_named(targets, "drain ≥ 0.8× baseline A @ 100 sessions")
    assert drain["pass"] is True  # still 900 vs 1000 against baseline A
    assert drain["floor"] == 0.5 and drain["floor_pass"] is False  # the floor itself drains 0.5× baseline A
    assert drain["over_floor"] == 1.8  # turnstile 900 / floor 500
    p99 = _target_named(targets, "paced p99 ≤ 2.5× baseline A @ 100 sessions")
    assert p99["floor"] == 3.0 and p99["floor_pass"] is False  # 12 / 4 ms: lower is better, over the limit
    assert p99["over_floor"] == 0.75
    cpu = _target_named(targets, "worker CPU/msg ≤ 1.5× baseline A @ 100 sessions")
    assert cpu["floor_pass"] is True  # 900 / 700 µs ≤ 1.5


def test_floor_note_says_whether_the_floor_meets_the_limit() -> None:
    targets = evaluate_targets(_with_floor(), ("load",))
    note = floor_note(_target_named(targets, "drain ≥ 0.8× baseline A @ 100 sessions"))
    assert note == "; floor 0.50× baseline A (misses the limit too), turnstile 1.80× the floor"
    assert "meets the limit" in floor_note(_target_named(targets, "paced p50 ≤ 2× baseline A @ 100 sessions"))


def test_without_a_floor_row_the_targets_carry_no_floor_figures() -> None:
    targets = evaluate_targets(_result(), ("load",))
    assert all("floor" not in t and floor_note(t) == "" for t in targets)


def test_with_floor_leaves_a_missing_figure_missing() -> None:
    target = with_floor({"limit": 0.8}, 10.0, None, 20.0, True)
    assert target["floor"] is None and target["floor_pass"] is None and target["over_floor"] is None
    assert floor_note(target) == "; floor: no figure"


def test_the_floor_running_the_engine_is_printed_beside_the_floor() -> None:
    result = _with_floor()
    result["load"].append(_row("floor+engine", 100, 800.0, 4.5, 10.0, 1_200.0))
    targets = evaluate_targets(result, ("load",))
    cpu = _target_named(targets, "worker CPU/msg ≤ 1.5× baseline A @ 100 sessions")
    assert cpu["engine"] == pytest.approx(1_200 / 700) and cpu["engine_pass"] is False  # the engine's share alone misses
    assert cpu["over_engine"] == pytest.approx(1_000 / 1_200)
    assert cpu["pass"] is True  # still judged against baseline A only
    note = floor_note(cpu)
    assert note.index("; floor ") < note.index("; floor+engine 1.71× baseline A (misses the limit too)")
    assert note.endswith("turnstile 0.83× the floor+engine")
    assert cpu["detail"].endswith("(floor 900) (floor+engine 1,200)")


def test_turnstile_with_its_shell_parts_off_is_printed_after_the_floors_and_does_not_judge() -> None:
    result = _with_floor()
    result["load"].append(_row("floor+engine", 100, 800.0, 4.5, 10.0, 1_200.0))
    result["load"].append(_row("turnstile-off", 100, 1_100.0, 3.5, 9.0, 800.0))
    targets = evaluate_targets(result, ("load",))
    cpu = _target_named(targets, "worker CPU/msg ≤ 1.5× baseline A @ 100 sessions")
    assert cpu["off"] == pytest.approx(800 / 700) and cpu["off_pass"] is True
    assert cpu["over_off"] == pytest.approx(1_000 / 800)  # what the rules those parts keep cost, as a ratio
    assert cpu["pass"] is True  # still judged against baseline A only
    note = floor_note(cpu)
    assert note.index("; floor+engine ") < note.index("; turnstile-off 1.14× baseline A (meets the limit)")
    assert note.endswith("turnstile 1.25× the turnstile-off")
    assert cpu["detail"].endswith("(floor 900) (floor+engine 1,200) (turnstile-off 800)")


def test_on_postgresql_the_floors_on_postgresql_are_printed_beside_the_fair_peer_and_do_not_judge() -> None:
    result = _result()
    result["load"].append(_row("floor/pg", 100, 500.0, 10.0, 50.0, 900.0))
    result["load"].append(_row("floor+engine/pg", 100, 350.0, 14.0, 55.0, 1_500.0))
    targets = evaluate_targets(result, ("load",))
    p50 = _target_named(targets, "turnstile (PostgreSQL) paced p50 ahead of the fair peer @ 100 sessions")
    assert p50["floor_pg"] == pytest.approx(10 / 12) and p50["floor_pg_pass"] is True  # the floor is ahead of the peer
    assert p50["engine_pg"] == pytest.approx(14 / 12) and p50["engine_pg_pass"] is False  # with the engine it is not
    assert p50["over_floor_pg"] == pytest.approx(30 / 10)
    assert p50["pass"] is False  # still judged on turnstile against the fair peer: 30 > 12 ms
    note = floor_note(p50)
    assert "; floor/pg 0.83× the fair peer (meets the limit), turnstile 3.00× the floor/pg" in note
    assert note.endswith("; floor+engine/pg 1.17× the fair peer (misses the limit too), turnstile 2.14× the floor+engine/pg")
    assert p50["detail"].endswith("(floor/pg 10.00) (floor+engine/pg 14.00)")
    drain = _target_named(targets, "turnstile (PostgreSQL) drain ahead of the fair peer @ 100 sessions")
    assert drain["floor_pg"] == pytest.approx(500 / 400) and drain["floor_pg_pass"] is True
    sqlite = _target_named(targets, "turnstile (SQLite) paced p50 ahead of the fair peer @ 100 sessions")
    assert "floor_pg" not in sqlite and floor_note(sqlite) == ""  # SQLite's targets carry no PostgreSQL floor

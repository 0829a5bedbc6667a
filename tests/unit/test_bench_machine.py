"""The bench's machine meter: steal and the other processes' CPU over a phase's window, and the report's line."""

from __future__ import annotations

from bench.common import MachineCpu
from bench.report import table


def test_shares_are_percent_of_the_machine_with_the_measured_processes_taken_out() -> None:
    before = MachineCpu(busy=10.0, steal=1.0, total=100.0)
    after = MachineCpu(busy=70.0, steal=6.0, total=200.0)  # 100 CPU-seconds passed: 60 busy, 5 stolen

    shares = before.share_until(after, charged_s=45.0)

    assert shares == {"steal_pct": 5.0, "busy_pct": 60.0, "others_pct": 15.0}


def test_charged_cpu_above_the_machines_busy_time_leaves_no_negative_others() -> None:
    # psutil's per-process and machine-wide clocks tick apart: a measured process can read a little more.
    shares = MachineCpu(0.0, 0.0, 0.0).share_until(MachineCpu(1.0, 0.0, 2.0), charged_s=1.2)

    assert shares["others_pct"] == 0.0


def test_an_empty_window_reports_zeros_instead_of_dividing_by_zero() -> None:
    same = MachineCpu(5.0, 1.0, 50.0)

    assert same.share_until(same, charged_s=0.0) == {"steal_pct": 0.0, "busy_pct": 0.0, "others_pct": 0.0}


def test_a_live_sample_counts_every_cpu_second_once() -> None:
    now = MachineCpu.now()

    assert 0.0 <= now.steal <= now.total
    assert 0.0 < now.busy < now.total


def test_the_report_prints_each_rows_paced_steal_and_others() -> None:
    def row(worker: str, machine: dict[str, float] | None) -> dict[str, object]:
        paced: dict[str, object] = {"latency": {"p50_ms": 5.0, "p99_ms": 9.0, "max_ms": 10.0}, "sent": 5, "answered": 5}
        if machine is not None:
            paced["extra"] = {"machine": machine}
        return {"worker": worker, "turn": "plain", "sessions": 100, "drain": {}, "paced": paced}

    result = {
        "load": [
            row("turnstile", {"steal_pct": 3.25, "busy_pct": 70.0, "others_pct": 12.5}),
            row("baseline", None),  # a row run before the meter existed
        ],
        "targets": [],
    }

    text = table(result)

    assert "Paced window, steal/others % of the machine: turnstile @ 100 3.2/12.5" in text
    assert "baseline @" not in text.split("Paced window")[1].splitlines()[0]

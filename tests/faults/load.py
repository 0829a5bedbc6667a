"""Shared load shapes and the assertion every case ends with."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.faults.rig import FaultRig
from tests.soak.oracle import OracleReport


def sessions(n: int, tag: str) -> list[str]:
    return [f"{tag}-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]


def mixed(slot: int) -> str:
    """Every 5th turn stalls a little (faults land mid-turn), every 7th calls a journaled tool first."""
    lines = ""
    if slot % 7 == 3:
        lines += '/tool knowledge_search {"query": "fault"}\n'
    if slot % 5 == 1:
        lines += "/stall 0.3\n"
    return lines


def check(rig: FaultRig, report: OracleReport, row: Callable[..., None], fault: str, runs: int = 1) -> None:
    """Fail with the oracle's table unless every clause holds; add the case's row to the suite's table."""
    table = rig.table(report)
    print(table)
    served = "n/a" if rig.served_after_s is None else f"{rig.served_after_s:.1f} s"
    drained = "not in bound" if report.drained_after_s is None else f"{report.drained_after_s:.1f} s"
    outcome = "PASS" if report.passed else f"FAIL {report.failed_clauses()}"
    row(fault, runs, report.messages, outcome,
        f"answered {report.answered}, dropped {report.dropped}, refused {len(rig.refused)}, "
        f"serving again after {served}, all accounted after {drained}")
    if not report.passed:
        pytest.fail(f"{fault}: oracle failed {report.failed_clauses()}\n{table}")

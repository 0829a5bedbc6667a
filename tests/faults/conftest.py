"""The fault suite: `make test` runs the CI selection; `make test-faults` (TURNSTILE_FAULTS=all) runs every case.

Each case reports one row (fault, runs, messages, outcome, figures) through the ``fault_row`` fixture; the rows are
printed as a table at the end of the run (the table in docs/protocol.md "Guarantees under faults" comes from it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.hang_report import tasks_reported_before_timeout  # noqa: F401  (autouse: a hang names its awaits)

LONG = "faults_long"


@dataclass(frozen=True)
class FaultRow:
    fault: str
    runs: int
    messages: int
    outcome: str
    figures: str


ROWS: list[FaultRow] = []


def everything() -> bool:
    return os.environ.get("TURNSTILE_FAULTS", "") == "all"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in item.nodeid:
            item.add_marker(pytest.mark.integration)
    if everything():
        return
    keep = [item for item in items if item.get_closest_marker(LONG) is None]
    dropped = [item for item in items if item.get_closest_marker(LONG) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def fault_row() -> Callable[..., None]:
    def add(fault: str, runs: int, messages: int, outcome: str, figures: str = "") -> None:
        ROWS.append(FaultRow(fault, runs, messages, outcome, figures))

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    terminalreporter.section("faults × runs × outcome")
    terminalreporter.write_line("| fault | runs | messages | outcome | figures |")
    terminalreporter.write_line("| --- | --- | --- | --- | --- |")
    for r in ROWS:
        terminalreporter.write_line(f"| {r.fault} | {r.runs} | {r.messages} | {r.outcome} | {r.figures} |")

"""The CI-sized crash soak (issue 9): 20 sessions × 10 messages, 4 SIGKILLs, 2 deletions, checked by the oracle.

``make test-soak`` runs the issue's size (``python -m tests.soak``). Seed and sizes: ``TURNSTILE_SOAK_*``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.config import SoakConfig
from tests.soak.driver import run_soak
from tests.soak.oracle import summary_table

pytestmark = [pytest.mark.integration, pytest.mark.soak]


@pytest.mark.rule("MQ-8", "MQ-5", "SM-22")
@pytest.mark.timeout(170)
async def test_every_message_is_answered_once_in_order_or_dropped_under_kills_and_deletions(tmp_path: Path) -> None:
    config = SoakConfig.from_env("ci")
    record, report = await run_soak(config, tmp_path)
    table = summary_table(record, report)
    print(table)
    if not report.passed:
        rerun = f"rerun with TURNSTILE_SOAK_SEED={config.seed}"
        pytest.fail(f"soak failed clauses {report.failed_clauses()}; {rerun}\n{table}")

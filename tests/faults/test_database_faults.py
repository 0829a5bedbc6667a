"""20 sessions writing SQLite at once while another process holds the database's write lock."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.load import check, sessions
from tests.faults.rig import FaultRig
from tests.integration.harness import wait_for
from tests.soak.stored import read_stream

pytestmark = pytest.mark.timeout(240)

WRITERS = 20


async def _event_types(rig: FaultRig) -> list[str]:
    js = rig.client.jetstream()
    stored = await read_stream(js, rig.subjects.events_stream, f"{rig.prefix}.events._.>")
    return [str(m.body.get("type")) for m in stored]


@pytest.mark.parametrize("lock_s", [4.0, pytest.param(25.0, marks=pytest.mark.faults_long)])
async def test_twenty_sqlite_writers_and_another_process_holding_the_write_lock(
    lock_s: float, tmp_path: Path, fault_row: Callable[..., None]
) -> None:
    # 4 s: inside SQLite's busy timeout (10 s), writers wait; 25 s: staging is refused twice (10 s each) and
    # retried in place, announced by service.degraded, then service.recovered.
    async with FaultRig(tmp_path) as rig:
        sids = sessions(WRITERS, "w")
        await rig.load(sids, 1, rate_per_s=200.0)  # every session exists and has a journal
        await wait_for(lambda: rig.probe(), timeout_s=60, what="the first round answered")
        holder = sqlite3.connect(str(rig.db_path), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another process (this one) holds the write lock
            load = asyncio.create_task(rig.load(sids, 4, rate_per_s=40.0))
            await asyncio.sleep(lock_s)  # the fault's length
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        rig.fault_ended()
        await load
        report, _ = await rig.settle()
        events = await _event_types(rig)
        if lock_s > 20:
            assert "service.degraded" in events and events[-1] == "service.recovered", events
        check(rig, report, fault_row, f"{WRITERS} sessions writing SQLite, write lock held {lock_s:.0f} s elsewhere")

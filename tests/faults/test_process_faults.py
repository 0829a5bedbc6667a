"""Service and broker killed (SIGKILL) and paused (SIGSTOP) under load; the broker down when the service starts.

Oracle (tests/soak/oracle.py) after each: every accepted message answered exactly once or dropped with an event,
per-session order, and serving again within the rig's bound once the fault ends.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.load import check, mixed, sessions
from tests.faults.rig import FaultRig
from tests.integration.harness import wait_for

pytestmark = pytest.mark.timeout(240)


async def _load_while(rig: FaultRig, fault: Callable[[], object], n_sessions: int, messages: int) -> None:
    rate = 20.0 if n_sessions * messages > 100 else 15.0
    load = asyncio.create_task(rig.load(sessions(n_sessions, "f"), messages, rate_per_s=rate, directives=mixed))
    try:
        result = fault()
        if asyncio.iscoroutine(result):
            await result
    finally:
        await load


async def _service_kills(rig: FaultRig, kills: int) -> None:
    for _ in range(kills):
        await wait_for(lambda: len(rig.record.published) >= 10, timeout_s=30, what="some load first")
        await asyncio.sleep(0.8)  # the fault's moment in the load, not a wait for a condition
        await rig.kill_service()
        await asyncio.sleep(1.0)  # the restart delay (outage length), not a wait for a condition
        await rig.restart_service()
        rig.fault_ended()


@pytest.mark.rule("MQ-8")
@pytest.mark.parametrize("run", [0, pytest.param(1, marks=pytest.mark.faults_long), pytest.param(2, marks=pytest.mark.faults_long)])
async def test_service_sigkill_under_load(run: int, tmp_path: Path, fault_row: Callable[..., None]) -> None:
    async with FaultRig(tmp_path) as rig:
        await _load_while(rig, lambda: _service_kills(rig, 2), n_sessions=6, messages=8)
        report, _ = await rig.settle()
        check(rig, report, fault_row, f"service SIGKILL ×2, restart after 1 s (run {run})")


KILL_RUNS = int(os.environ.get("TURNSTILE_FAULTS_KILL_RUNS", "4"))


async def _random_kills(rig: FaultRig, rng: random.Random, kills: int, span_s: float) -> None:
    t0 = time.monotonic()
    for at_s in sorted(rng.uniform(0.1, 0.9) * span_s for _ in range(kills)):
        await asyncio.sleep(max(0.0, t0 + at_s - time.monotonic()))  # the planned moment, not a condition
        await rig.kill_service()
        await asyncio.sleep(rng.uniform(0.0, 3.0))  # the planned restart delay
        await rig.restart_service()
        rig.fault_ended()


@pytest.mark.rule("MQ-8")
@pytest.mark.faults_long
@pytest.mark.parametrize("seed", range(KILL_RUNS))
async def test_service_kill_campaign(seed: int, tmp_path: Path, fault_row: Callable[..., None]) -> None:
    # 12 sessions × 20 messages at 20/s (12 s), 4 SIGKILLs at seeded moments, restarts after 0-3 s.
    rng = random.Random(seed)
    async with FaultRig(tmp_path) as rig:
        await _load_while(rig, lambda: _random_kills(rig, rng, 4, 12.0), n_sessions=12, messages=20)
        report, _ = await rig.settle()
        check(rig, report, fault_row, f"service SIGKILL ×4 at seeded moments, restart after 0-3 s (seed {seed})")


async def _service_pause(rig: FaultRig, pause_s: float) -> None:
    await wait_for(lambda: len(rig.record.published) >= 10, timeout_s=30, what="some load first")
    rig.proc.pause()
    await asyncio.sleep(pause_s)  # the fault's length
    rig.proc.resume()
    rig.fault_ended()


@pytest.mark.faults_long
@pytest.mark.parametrize("pause_s", [3.0, 8.0])
async def test_service_sigstop_under_load(pause_s: float, tmp_path: Path, fault_row: Callable[..., None]) -> None:
    # 3 s: past the lease TTL (1.5 s); 8 s: past the ack wait too (5 s), so JetStream redelivers what it held.
    async with FaultRig(tmp_path) as rig:
        await _load_while(rig, lambda: _service_pause(rig, pause_s), n_sessions=5, messages=8)
        report, _ = await rig.settle()
        assert rig.proc.running
        check(rig, report, fault_row, f"service SIGSTOP {pause_s:.0f} s")


async def _broker_kill(rig: FaultRig, down_s: float) -> None:
    await wait_for(lambda: len(rig.record.published) >= 10, timeout_s=30, what="some load first")
    await rig.kill_broker()
    await asyncio.sleep(down_s)  # the outage's length
    await rig.restart_broker()
    rig.fault_ended()


@pytest.mark.parametrize("down_s", [3.0, pytest.param(10.0, marks=pytest.mark.faults_long)])
async def test_broker_sigkill_under_load(down_s: float, tmp_path: Path, fault_row: Callable[..., None]) -> None:
    async with FaultRig(tmp_path) as rig:
        await _load_while(rig, lambda: _broker_kill(rig, down_s), n_sessions=5, messages=8)
        report, _ = await rig.settle()
        assert rig.proc.running, rig.proc.log_text()[-2000:]
        check(rig, report, fault_row, f"broker SIGKILL, restart after {down_s:.0f} s")


async def _broker_pause(rig: FaultRig, pause_s: float) -> None:
    await wait_for(lambda: len(rig.record.published) >= 10, timeout_s=30, what="some load first")
    rig.pause_broker()
    await asyncio.sleep(pause_s)  # the fault's length
    rig.resume_broker()
    rig.fault_ended()


@pytest.mark.faults_long
async def test_broker_sigstop_under_load(tmp_path: Path, fault_row: Callable[..., None]) -> None:
    async with FaultRig(tmp_path) as rig:
        await _load_while(rig, lambda: _broker_pause(rig, 8.0), n_sessions=5, messages=8)
        report, _ = await rig.settle()
        assert rig.proc.running, rig.proc.log_text()[-2000:]
        check(rig, report, fault_row, "broker SIGSTOP 8 s")


@pytest.mark.faults_long  # also in tests/integration/test_broker_outage.py (exit 4 after the timeout)
async def test_broker_down_when_the_service_starts(tmp_path: Path, fault_row: Callable[..., None]) -> None:
    rig = FaultRig(tmp_path, env={"TURNSTILE_CONNECT_TIMEOUT_S": "60"})
    try:
        await rig.start()
        await rig.kill_service()
        await rig.kill_broker()
        await rig.proc.start()  # the broker is down: it must wait and say so, not hang silently or crash
        await wait_for(lambda: "not reachable" in rig.proc.log_text(), timeout_s=20, what="the retry warning")
        assert rig.proc.running
        await rig.restart_broker()
        rig.fault_ended()
        await rig.wait_ready()
        for i in range(3):
            await rig.publish("down-at-start", i)
        report, _ = await rig.settle()
        check(rig, report, fault_row, "broker down when the service starts (up after the first retry warning)")
    finally:
        await rig.close()

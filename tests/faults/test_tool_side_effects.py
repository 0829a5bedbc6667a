"""A crash at each point around a tool call's side effect (SIGKILL, then a restart).

| kill point | non-idempotent tool | idempotent tool |
| --- | --- | --- |
| call journaled, before the effect | not re-run: effect 0×, a failed "not re-run" result | re-run: 1× |
| after the effect, before its result is journaled | not re-run: 1× | re-run: 2× (documented) |
| after the result is journaled | not re-run: 1× | not re-run: 1× |

Every message is still answered exactly once (the oracle), in order.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.faults.effect_tool import EFFECT_DIR_ENV
from tests.faults.load import check
from tests.faults.rig import FaultRig
from tests.integration.harness import Collector, wait_for
from tests.integration.ks_helpers import transitions

pytestmark = pytest.mark.timeout(180)

PAUSE_S = 3.0
EXPECTED = {  # (idempotent, kill point) → times the side effect happened in the end
    (False, "before_effect"): 0,
    (False, "after_effect"): 1,
    (False, "after_result"): 1,
    (True, "before_effect"): 1,
    (True, "after_effect"): 2,
    (True, "after_result"): 1,
}
CI = {(False, "after_effect")}  # the case that must not repeat the effect; `make test-faults` runs all six


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.rule("KS-10", "MQ-3")
@pytest.mark.parametrize(
    ("idempotent", "point"),
    [pytest.param(i, p, marks=() if (i, p) in CI else pytest.mark.faults_long, id=f"{'idem' if i else 'once'}-{p}")
     for (i, p) in EXPECTED],
)
async def test_a_kill_around_a_side_effect(
    idempotent: bool, point: str, tmp_path: Path, fault_row: Callable[..., None]
) -> None:
    effects_dir = tmp_path / "effects"
    effects_dir.mkdir()
    env = {EFFECT_DIR_ENV: str(effects_dir)}
    async with FaultRig(tmp_path, env=env, module="tests.faults.effect_service") as rig:
        sid = f"effect-{point}"
        checkpoints = await Collector().attach(rig.client, rig.subjects.checkpoint(sid))
        tool = "append_effect_idem" if idempotent else "append_effect"
        args = {"tag": "e1", "before_s": PAUSE_S if point == "before_effect" else 0,
                "after_s": PAUSE_S if point == "after_effect" else 0}
        script = f"/tool {tool} {orjson.dumps(args).decode()}\n"
        if point == "after_result":
            script += f"/stall {PAUSE_S}\n"  # the next model call: the kill lands after the result is journaled
        await rig.publish(sid, 0, script)
        await rig.publish(sid, 1)  # queued behind it: answered after it, once
        calls, effects = effects_dir / "calls.log", effects_dir / "effects.log"
        if point == "before_effect":
            await wait_for(lambda: _lines(calls), timeout_s=30, what="the call to start")
        elif point == "after_effect":
            await wait_for(lambda: _lines(effects), timeout_s=30, what="the side effect")
        else:
            await wait_for(lambda: "tool_result" in transitions(checkpoints), timeout_s=30, what="the journaled result")
        await rig.kill_service()
        await rig.restart_service()
        rig.fault_ended()
        report, _ = await rig.settle()
        times = len(_lines(effects))
        label = f"SIGKILL {point.replace('_', ' ')}, {'idempotent' if idempotent else 'non-idempotent'} tool"
        check(rig, report, fault_row, f"{label}: side effect {times}×")
        assert times == EXPECTED[(idempotent, point)], (times, _lines(calls))

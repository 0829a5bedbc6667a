"""Test-only tools with a visible side effect: a line appended to a file, with pauses around it to kill in.

``append_effect`` is not idempotent (a crash mid-call must not repeat it); ``append_effect_idem`` is (it may be).
Files live in ``TURNSTILE_FAULT_EFFECT_DIR``: ``calls.log`` gets ``start <tag>`` when a call begins,
``effects.log`` gets ``<tag>`` (the side effect itself).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from core.engine.tools import ToolContext, ToolDefinition, ToolOutcome
from core.engine.tools.registry import obj

EFFECT_DIR_ENV = "TURNSTILE_FAULT_EFFECT_DIR"


def _append(name: str, line: str) -> None:
    path = Path(os.environ[EFFECT_DIR_ENV]) / name
    with path.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


async def _effect(_ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    tag = str(args["tag"])
    _append("calls.log", f"start {tag}")
    await asyncio.sleep(float(args.get("before_s", 0)))  # a window to kill in before the side effect
    _append("effects.log", tag)
    await asyncio.sleep(float(args.get("after_s", 0)))  # … and after it, before its result is journaled
    return ToolOutcome(ok=True, content=f"appended {tag}")


_PARAMS = obj({"tag": {"type": "string"}, "before_s": {"type": "number"}, "after_s": {"type": "number"}}, ["tag"])

APPEND_EFFECT = ToolDefinition(
    name="append_effect", description="append a line (not idempotent)", parameters=_PARAMS, handler=_effect,
    idempotent=False,
)
APPEND_EFFECT_IDEM = ToolDefinition(
    name="append_effect_idem", description="append a line (idempotent)", parameters=_PARAMS, handler=_effect,
    idempotent=True,
)
EFFECT_TOOLS = [APPEND_EFFECT, APPEND_EFFECT_IDEM]

"""A test-only tool plugin, loaded through ``TURNSTILE_TOOL_MODULES=["tests.integration.plugin_tools"]``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from core.engine.tools import ToolContext, custom_tool

LOG_ARGS = {
    "type": "object",
    "properties": {"log": {"type": "string", "minLength": 1}},
    "required": ["log"],
    "additionalProperties": False,
}


async def _hold(args: dict[str, Any]) -> str:
    """Note the run in the log file, then wait until ``<log>.release`` exists (a kill lands here)."""
    log = Path(args["log"])
    with log.open("a") as out:  # noqa: ASYNC230 (one line appended to the test's own log file)
        out.write("run\n")
    release = log.with_name(log.name + ".release")
    while not release.exists():  # noqa: ASYNC110 (held until the test creates the file from its own process: no Event crosses processes; the tool's timeout_s bounds it)
        await asyncio.sleep(0.02)
    return f"done after {log.read_text().count('run')} run(s)"  # noqa: ASYNC240 (the test's own few-line log file)


@custom_tool(name="hold_once", description="Side effect, not safe to re-run.", parameters=LOG_ARGS,
             modes=["conversation"], idempotent=False, timeout_s=120)
async def hold_once(ctx: ToolContext, args: dict[str, Any]) -> str:
    return await _hold(args)


@custom_tool(name="hold_again", description="Safe to re-run.", parameters=LOG_ARGS,
             modes=["conversation"], idempotent=True, timeout_s=120)
async def hold_again(ctx: ToolContext, args: dict[str, Any]) -> str:
    return await _hold(args)


@custom_tool(name="sleepy", description="Never finishes in time.", parameters={"type": "object"},
             modes=["conversation"], idempotent=True, timeout_s=0.3)
async def sleepy(ctx: ToolContext, args: dict[str, Any]) -> str:
    await asyncio.Event().wait()
    return "unreachable"


@custom_tool(name="explode", description="Always raises.", parameters={"type": "object"},
             modes=["conversation"], idempotent=True)
async def explode(ctx: ToolContext, args: dict[str, Any]) -> str:
    raise RuntimeError("the tool broke")


@custom_tool(name="free_time_only", description="Not for conversations.", parameters={"type": "object"},
             modes=["free_time"], idempotent=True)
async def free_time_only(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "ran"


@custom_tool(
    name="strict_code", description="Takes a code of three capital letters.",
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["code"],
        "additionalProperties": False,
    },
    modes=["conversation"], idempotent=True,
)
async def strict_code(ctx: ToolContext, args: dict[str, Any]) -> str:
    return f"code {args['code']}"


@custom_tool(name="flood", description="Returns `chars` characters of text.",
             parameters={"type": "object", "properties": {"chars": {"type": "integer", "minimum": 0}}},
             modes=["conversation"], idempotent=True)
async def flood(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "f" * int(args.get("chars", 0))


TOOLS = [hold_once, hold_again, sleepy, explode, free_time_only, strict_code, flood]


"""read_file / write_file / list_dir confined to the session's work binding.

Paths are resolved against ``current_dir`` (else the binding's root), then
``realpath``-checked to lie inside the root, an extra root or a worktree, so
symlinks and ``..`` cannot escape. Writes take a session-scoped lease on the file.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from core.engine.options import WorkBinding
from core.engine.tools.context import ToolContext
from core.engine.tools.registry import ToolDefinition, ToolOutcome, obj
from core.errors import Forbidden, InvalidInput, NotFound

MAX_READ_BYTES = 256 * 1024


def _inside(real: str, allowed: list[str]) -> bool:
    return any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in allowed)


def confine(work: WorkBinding | None, path: str) -> str:
    """The real path of ``path`` if it lies inside the binding; Forbidden otherwise."""
    if work is None:
        raise Forbidden("this session has no work binding")
    if not isinstance(path, str) or "\x00" in path:
        raise InvalidInput("path must be a string without NUL")
    allowed = [os.path.realpath(d) for d in work.allowed_dirs()]
    base = os.path.realpath(work.current_dir or work.root)
    if not _inside(base, allowed):
        raise Forbidden("current_dir lies outside the work binding")
    real = os.path.realpath(os.path.join(base, path))
    if not _inside(real, allowed):
        raise Forbidden(f"{path!r} lies outside the work binding")
    return real


def _read(real: str, limit: int) -> str:
    if not os.path.isfile(real):
        raise NotFound("no such file")
    with open(real, "rb") as handle:
        data = handle.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    return text + ("\n[truncated]" if len(data) > limit else "")


def _write(real: str, content: str) -> None:
    os.makedirs(os.path.dirname(real), exist_ok=True)
    tmp = f"{real}.turnstile-tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(content)
    os.replace(tmp, real)


def _list(real: str) -> list[str]:
    if not os.path.isdir(real):
        raise NotFound("no such directory")
    return sorted(name + ("/" if os.path.isdir(os.path.join(real, name)) else "") for name in os.listdir(real))


async def _read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    real = confine(ctx.state.work, args["path"])
    limit = int(args.get("max_bytes", MAX_READ_BYTES))
    return ToolOutcome(ok=True, content=await asyncio.to_thread(_read, real, limit))


async def _write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    real = confine(ctx.state.work, args["path"])
    await ctx.leases.acquire(ctx.state.managed_source_session_id, real)
    await asyncio.to_thread(_write, real, args["content"])
    return ToolOutcome(ok=True, content=f"wrote {len(args['content'].encode('utf-8'))} bytes to {args['path']}")


async def _list_dir(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    real = confine(ctx.state.work, args.get("path", "."))
    names = await asyncio.to_thread(_list, real)
    return ToolOutcome(ok=True, content="\n".join(names) if names else "(empty)")


READ_FILE = ToolDefinition(
    name="read_file",
    description="Read a text file inside the work directories.",
    parameters=obj(
        {"path": {"type": "string", "minLength": 1}, "max_bytes": {"type": "integer", "minimum": 1}}, ["path"]
    ),
    handler=_read_file,
    requires_work=True,
)

WRITE_FILE = ToolDefinition(
    name="write_file",
    description="Write (replace) a text file inside the work directories.",
    parameters=obj({"path": {"type": "string", "minLength": 1}, "content": {"type": "string"}}, ["path", "content"]),
    handler=_write_file,
    requires_work=True,
)

LIST_DIR = ToolDefinition(
    name="list_dir",
    description="List a directory inside the work directories.",
    parameters=obj({"path": {"type": "string"}}, []),
    handler=_list_dir,
    requires_work=True,
)

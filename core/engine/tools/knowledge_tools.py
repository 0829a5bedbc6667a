"""knowledge_read / knowledge_search / knowledge_write over the session's roots."""

from __future__ import annotations

from typing import Any

import orjson

from core.engine.knowledge import inside, read_node, staged_node
from core.engine.state import KnowledgeOp
from core.engine.tools.context import ToolContext
from core.engine.tools.registry import StagedEntry, ToolDefinition, ToolOutcome, obj
from core.errors import Forbidden, InvalidInput, NotFound

WRITE_MODES = frozenset({"free_time", "wakeup", "ingress"})


async def _read(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    node_id = args["node_id"]
    plan = ctx.state.knowledge_plan
    if not await inside(ctx.knowledge, plan, node_id, ctx.readable_roots):
        raise Forbidden(f"node {node_id!r} is outside this session's roots")
    node = await read_node(ctx.knowledge, plan, node_id)
    if node is None:
        raise NotFound(f"no knowledge node {node_id!r}")
    children = {c.id for c in await ctx.knowledge.children(node_id)}
    children |= {op.node_id for op in plan.ops if op.op == "put_node" and op.parent_id == node_id}
    body = {
        "id": node.id,
        "parent_id": node.parent_id,
        "version": node.version,
        "content": node.content,
        "children": sorted(children),
    }
    return ToolOutcome(ok=True, content=orjson.dumps(body).decode())


async def _search(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    query = args["query"].strip()
    if not query:
        raise InvalidInput("query must not be blank")
    limit = int(args.get("limit", 10))
    plan = ctx.state.knowledge_plan
    hits: dict[str, str] = {}
    for op in plan.ops:
        if op.op == "put_node" and query.lower() in (op.content or "").lower():
            hits[op.node_id] = op.content or ""
    for node in await ctx.knowledge.search(query, ctx.readable_roots, limit):
        staged = staged_node(plan, node.id)
        if staged is None:
            hits.setdefault(node.id, node.content)
    lines = [f"{node_id}: {content[:200]}" for node_id, content in sorted(hits.items())[:limit]]
    return ToolOutcome(ok=True, content="\n".join(lines) if lines else "no matches")


async def _write(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    writable = ctx.state.root_node_ids
    plan = ctx.state.knowledge_plan
    node_id = args.get("node_id") or ctx.new_id("node")
    existing = await read_node(ctx.knowledge, plan, node_id)
    if existing is not None and not await inside(ctx.knowledge, plan, node_id, writable):
        raise Forbidden(f"node {node_id!r} is not under a writable root")
    parent_id = args.get("parent_id", existing.parent_id if existing else None)
    moved = existing is None or parent_id != existing.parent_id
    if moved and (not parent_id or not await inside(ctx.knowledge, plan, parent_id, writable)):
            raise Forbidden(f"parent {parent_id!r} is not under a writable root")
    prior = staged_node(plan, node_id)
    if prior is not None:
        base = prior.base_version
    else:
        committed = await ctx.knowledge.get_node(node_id)
        base = committed.version if committed else None
    op = KnowledgeOp(op="put_node", node_id=node_id, parent_id=parent_id, content=args["content"], base_version=base)
    entry = StagedEntry("event", {"type": "knowledge_staged", "op": op.model_dump(mode="json")})
    return ToolOutcome(ok=True, content=f"staged {node_id}", entries=[entry])


KNOWLEDGE_READ = ToolDefinition(
    name="knowledge_read",
    description="Read one knowledge node (content, version, children) inside your roots.",
    parameters=obj({"node_id": {"type": "string", "minLength": 1}}, ["node_id"]),
    handler=_read,
)

KNOWLEDGE_SEARCH = ToolDefinition(
    name="knowledge_search",
    description="Find knowledge nodes inside your roots whose content contains the query.",
    parameters=obj(
        {"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
        ["query"],
    ),
    handler=_search,
)

KNOWLEDGE_WRITE = ToolDefinition(
    name="knowledge_write",
    description="Stage a knowledge node write under a writable root; committed when the session commits.",
    parameters=obj(
        {
            "node_id": {"type": "string", "minLength": 1},
            "parent_id": {"type": "string", "minLength": 1},
            "content": {"type": "string"},
        },
        ["content"],
    ),
    handler=_write,
    modes=WRITE_MODES,
)

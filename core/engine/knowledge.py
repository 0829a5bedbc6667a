"""The knowledge store ("Kweb") port, an in-memory twin, and root-confinement helpers.

Nodes form a tree (``parent_id``); a session reads nodes inside its writable or
reference roots and writes only under writable roots. Writes are staged in the
session's ``KnowledgePlan`` and committed atomically by ``commit``: every op is
revalidated against the version it was based on, a mismatch raises
``core.errors.Conflict`` and nothing is written. ``commit`` is idempotent per
``write_session_id`` so a resumed session can repeat it safely.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from core.engine.state import KnowledgeOp, KnowledgePlan


class KnowledgeNode(BaseModel):
    """A committed (or staged, when read through a plan) knowledge node."""

    id: str
    parent_id: str | None = None
    content: str = ""
    version: int = 0


class KnowledgeObject(BaseModel):
    """A canonical binary object of the knowledge store."""

    object_id: str
    node_id: str
    file_name: str
    media_type: str
    data: bytes
    version: int = 1


@runtime_checkable
class KnowledgeStore(Protocol):
    """Port to the knowledge database."""

    async def get_node(self, node_id: str) -> KnowledgeNode | None:
        """The committed node, or None."""
        ...

    async def children(self, parent_id: str) -> list[KnowledgeNode]:
        """Committed children of ``parent_id`` ordered by id."""
        ...

    async def ancestors(self, node_id: str) -> list[str]:
        """Ids from the node's parent up to the top of its tree (empty if none or unknown)."""
        ...

    async def search(self, query: str, roots: list[str], limit: int) -> list[KnowledgeNode]:
        """Committed nodes inside ``roots`` whose content contains ``query`` (case-insensitive)."""
        ...

    async def get_object(self, object_id: str) -> KnowledgeObject | None:
        """The committed object, or None."""
        ...

    async def commit(self, write_session_id: str, ops: list[KnowledgeOp]) -> None:
        """Revalidate and apply ``ops`` atomically; Conflict on any stale base version."""
        ...


def collapse_ops(ops: list[KnowledgeOp]) -> dict[tuple[str, str], tuple[int | None, KnowledgeOp]]:
    """Per target: the base version of its first staged op and its last staged op."""
    out: dict[tuple[str, str], tuple[int | None, KnowledgeOp]] = {}
    for op in ops:
        key = ("node", op.node_id) if op.op == "put_node" else ("object", op.object_id or "")
        base = out[key][0] if key in out else op.base_version
        out[key] = (base, op)
    return out


def staged_node(plan: KnowledgePlan, node_id: str) -> KnowledgeOp | None:
    """The latest staged write of ``node_id`` in the plan."""
    for op in reversed(plan.ops):
        if op.op == "put_node" and op.node_id == node_id:
            return op
    return None


async def read_node(store: KnowledgeStore, plan: KnowledgePlan, node_id: str) -> KnowledgeNode | None:
    """A node as this session sees it: its own staged write wins over the committed one."""
    op = staged_node(plan, node_id)
    if op is not None:
        committed = await store.get_node(node_id)
        return KnowledgeNode(
            id=node_id,
            parent_id=op.parent_id,
            content=op.content or "",
            version=committed.version if committed else 0,
        )
    return await store.get_node(node_id)


async def chain_of(store: KnowledgeStore, plan: KnowledgePlan, node_id: str) -> list[str]:
    """The node and its ancestors, following staged parents first."""
    chain = [node_id]
    current = node_id
    while True:
        op = staged_node(plan, current)
        if op is not None:
            parent = op.parent_id
        else:
            node = await store.get_node(current)
            parent = node.parent_id if node else None
        if not parent or parent in chain:
            return chain
        chain.append(parent)
        current = parent


async def inside(store: KnowledgeStore, plan: KnowledgePlan, node_id: str, roots: list[str]) -> bool:
    """True when ``node_id`` is one of ``roots`` or lies under one."""
    if not roots:
        return False
    chain = await chain_of(store, plan, node_id)
    return any(root in chain for root in roots)

"""An in-memory ``KnowledgeStore`` for tests."""

from __future__ import annotations

import asyncio
import base64

from core.engine.knowledge import KnowledgeNode, KnowledgeObject, collapse_ops
from core.engine.state import KnowledgeOp
from core.errors import Conflict


class InMemoryKnowledgeStore:
    """Knowledge store in dicts (unit tests, embedding)."""

    def __init__(self) -> None:
        self.nodes: dict[str, KnowledgeNode] = {}
        self.objects: dict[str, KnowledgeObject] = {}
        self.committed_write_sessions: set[str] = set()
        self._lock = asyncio.Lock()

    def seed(self, node_id: str, parent_id: str | None, content: str) -> None:
        """Test helper: insert a committed node at version 1."""
        self.nodes[node_id] = KnowledgeNode(id=node_id, parent_id=parent_id, content=content, version=1)

    async def get_node(self, node_id: str) -> KnowledgeNode | None:
        """The committed node."""
        return self.nodes.get(node_id)

    async def children(self, parent_id: str) -> list[KnowledgeNode]:
        """Children ordered by id."""
        return sorted((n for n in self.nodes.values() if n.parent_id == parent_id), key=lambda n: n.id)

    async def ancestors(self, node_id: str) -> list[str]:
        """Parent chain, cycle-safe."""
        chain: list[str] = []
        node = self.nodes.get(node_id)
        while node is not None and node.parent_id and node.parent_id not in chain:
            chain.append(node.parent_id)
            node = self.nodes.get(node.parent_id)
        return chain

    async def search(self, query: str, roots: list[str], limit: int) -> list[KnowledgeNode]:
        """Substring search inside roots, ordered by id."""
        needle = query.lower()
        hits = []
        for node in sorted(self.nodes.values(), key=lambda n: n.id):
            if needle in node.content.lower():
                chain = [node.id, *await self.ancestors(node.id)]
                if any(r in chain for r in roots):
                    hits.append(node)
            if len(hits) >= limit:
                break
        return hits

    async def get_object(self, object_id: str) -> KnowledgeObject | None:
        """The committed object."""
        return self.objects.get(object_id)

    async def commit(self, write_session_id: str, ops: list[KnowledgeOp]) -> None:
        """All or nothing, revalidated under one lock."""
        async with self._lock:
            if write_session_id in self.committed_write_sessions:
                return
            collapsed = collapse_ops(ops)
            for (kind, key), (base, _op) in collapsed.items():
                current = self.nodes.get(key) if kind == "node" else self.objects.get(key)
                current_version = current.version if current is not None else None
                if current_version != base:
                    raise Conflict(
                        f"knowledge {kind} {key!r} changed since it was staged "
                        f"(staged on version {base}, now {current_version}); nothing was committed"
                    )
            for (kind, key), (base, op) in collapsed.items():
                version = (base or 0) + 1
                if kind == "node":
                    self.nodes[key] = KnowledgeNode(
                        id=key, parent_id=op.parent_id, content=op.content or "", version=version
                    )
                else:
                    self.objects[key] = KnowledgeObject(
                        object_id=key,
                        node_id=op.node_id,
                        file_name=op.file_name or key,
                        media_type=op.media_type or "application/octet-stream",
                        data=base64.b64decode(op.data_b64 or ""),
                        version=version,
                    )
            self.committed_write_sessions.add(write_session_id)

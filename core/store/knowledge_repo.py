"""SQL knowledge store: nodes, binary objects, and atomic revalidated commits."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from core.engine.knowledge import KnowledgeNode, KnowledgeObject, collapse_ops
from core.engine.state import KnowledgeOp
from core.errors import Conflict
from core.store.journal_tables import knowledge_commits, knowledge_nodes, knowledge_objects

MAX_DEPTH = 256


def _like_pattern(query: str) -> str:
    escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class SqlKnowledgeStore:
    """``KnowledgeStore`` on SQLAlchemy async; ``commit`` is one transaction, all or nothing."""

    def __init__(self, db_engine: AsyncEngine) -> None:
        self._db_engine = db_engine

    async def get_node(self, node_id: str) -> KnowledgeNode | None:
        """The committed node, or None."""
        async with self._db_engine.connect() as conn:
            row = (await conn.execute(select(knowledge_nodes).where(knowledge_nodes.c.id == node_id))).first()
        return KnowledgeNode(id=row.id, parent_id=row.parent_id, content=row.content, version=row.version) if row else None

    async def children(self, parent_id: str) -> list[KnowledgeNode]:
        """Children ordered by id."""
        query = select(knowledge_nodes).where(knowledge_nodes.c.parent_id == parent_id).order_by(knowledge_nodes.c.id)
        async with self._db_engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [KnowledgeNode(id=r.id, parent_id=r.parent_id, content=r.content, version=r.version) for r in rows]

    async def ancestors(self, node_id: str) -> list[str]:
        """Parent chain (cycle- and depth-safe)."""
        async with self._db_engine.connect() as conn:
            return await _ancestors(conn, node_id)

    async def search(self, query: str, roots: list[str], limit: int) -> list[KnowledgeNode]:
        """Case-insensitive substring search, restricted to ``roots``, ordered by id."""
        if not roots:
            return []
        stmt = (
            select(knowledge_nodes)
            .where(func.lower(knowledge_nodes.c.content).like(_like_pattern(query), escape="\\"))
            .order_by(knowledge_nodes.c.id)
        )
        hits: list[KnowledgeNode] = []
        async with self._db_engine.connect() as conn:
            for row in (await conn.execute(stmt)).all():
                chain = [row.id, *await _ancestors(conn, row.id)]
                if any(r in chain for r in roots):
                    hits.append(KnowledgeNode(id=row.id, parent_id=row.parent_id, content=row.content, version=row.version))
                    if len(hits) >= limit:
                        break
        return hits

    async def get_object(self, object_id: str) -> KnowledgeObject | None:
        """The committed object, or None."""
        async with self._db_engine.connect() as conn:
            row = (await conn.execute(select(knowledge_objects).where(knowledge_objects.c.object_id == object_id))).first()
        if row is None:
            return None
        return KnowledgeObject(
            object_id=row.object_id, node_id=row.node_id, file_name=row.file_name,
            media_type=row.media_type, data=bytes(row.data), version=row.version,
        )

    async def commit(self, write_session_id: str, ops: list[KnowledgeOp]) -> None:
        """Revalidate every target's version and apply all ops in one transaction.

        A stale base version raises Conflict and rolls everything back. A write
        session committed before is a no-op (a resumed session may repeat it).
        """
        try:
            async with self._db_engine.begin() as conn:
                done = await conn.execute(
                    select(knowledge_commits.c.write_session_id).where(knowledge_commits.c.write_session_id == write_session_id)
                )
                if done.first() is not None:
                    return
                for (kind, key), (base, op) in collapse_ops(ops).items():
                    if kind == "node":
                        await _put_node(conn, key, base, op)
                    else:
                        await _put_object(conn, key, base, op)
                await conn.execute(
                    insert(knowledge_commits).values(
                        write_session_id=write_session_id, committed_at=datetime.now(UTC).isoformat(), op_count=len(ops)
                    )
                )
        except IntegrityError as exc:
            raise Conflict(f"knowledge changed concurrently; nothing was committed ({exc.orig!r})") from exc


async def _ancestors(conn: AsyncConnection, node_id: str) -> list[str]:
    chain: list[str] = []
    current = node_id
    for _ in range(MAX_DEPTH):
        row = (await conn.execute(select(knowledge_nodes.c.parent_id).where(knowledge_nodes.c.id == current))).first()
        if row is None or not row.parent_id or row.parent_id in chain or row.parent_id == node_id:
            break
        chain.append(row.parent_id)
        current = row.parent_id
    return chain


def _stale(kind: str, key: str, base: int | None, current: int | None) -> Conflict:
    return Conflict(
        f"knowledge {kind} {key!r} changed since it was staged (staged on version {base}, now {current}); "
        "nothing was committed"
    )


async def _put_node(conn: AsyncConnection, key: str, base: int | None, op: KnowledgeOp) -> None:
    table = knowledge_nodes
    current = (await conn.execute(select(table.c.version).where(table.c.id == key).with_for_update())).scalar()
    if current != base:
        raise _stale("node", key, base, current)
    values = {"parent_id": op.parent_id, "content": op.content or "", "version": (base or 0) + 1}
    if base is None:
        await conn.execute(insert(table).values(id=key, **values))
        return
    result = await conn.execute(update(table).where(and_(table.c.id == key, table.c.version == base)).values(**values))
    if result.rowcount != 1:
        raise _stale("node", key, base, None)


async def _put_object(conn: AsyncConnection, key: str, base: int | None, op: KnowledgeOp) -> None:
    table = knowledge_objects
    current = (await conn.execute(select(table.c.version).where(table.c.object_id == key).with_for_update())).scalar()
    if current != base:
        raise _stale("object", key, base, current)
    values = {
        "node_id": op.node_id,
        "file_name": op.file_name or key,
        "media_type": op.media_type or "application/octet-stream",
        "data": base64.b64decode(op.data_b64 or ""),
        "version": (base or 0) + 1,
    }
    if base is None:
        await conn.execute(insert(table).values(object_id=key, **values))
        return
    result = await conn.execute(update(table).where(and_(table.c.object_id == key, table.c.version == base)).values(**values))
    if result.rowcount != 1:
        raise _stale("object", key, base, None)

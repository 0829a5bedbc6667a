"""SqlSessionRepository: the session manager's repository port on SQLAlchemy 2 async.

One ``StoreChange`` is one transaction (``engine.begin()``); upserts use the
dialect's ``INSERT … ON CONFLICT DO UPDATE`` (SQLite and PostgreSQL), compiled once
per dialect and table and run with ``run_rows`` (``core/store/driver_sql.py``). On SQLite a
session row's indexed columns are left out of the upsert and set by a second statement only
where they changed (``SESSION_INDEXED``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import JSON, Connection, RowMapping, Table, bindparam, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from core.errors import Unavailable
from core.sessions.ports import StoreChange, StoredState
from core.sessions.record_json import record_from_json, record_to_json
from core.sessions.records import JsonObject, JsonValue, PlaceKind, PlaceRecord, SessionRecord, WorkspaceRecord
from core.store.committer import GroupCommitter
from core.store.db import json_text, upsert_insert
from core.store.driver_sql import Piece, driver_sql, run_rows
from core.store.session_tables import generations_table, places_table, sessions_table, workspaces_table

Row = dict[str, Any]

# The indexed columns of ``sessions`` besides its key. SQLite rewrites an index's entry whenever an
# UPDATE names one of its columns, changed or not, so a whole-row upsert dirtied both indexes' pages
# on every record write: a turn's two writes (status, last turn, tokens) made 16 KiB of the ~77 KiB
# of WAL a message writes. On SQLite the upsert leaves them out of its SET and a second statement
# sets them only on the rows where they differ (a move, a workspace change), which is rare.
# (PostgreSQL compares the values itself: an update that changes no indexed value is a HOT update.)
SESSION_INDEXED = tuple(c.name for c in sessions_table.columns if c.index)


def session_row(record: SessionRecord) -> Row:
    """The ``sessions`` row of a record: its JSON form, less the derived kind and children (SM-1)."""
    row: Row = record_to_json(record)  # a fresh dict
    del row["kind"], row["children"]
    row["metadata_json"] = row.pop("metadata")
    return row


def session_from_row(row: RowMapping) -> SessionRecord:
    """A record from its row; malformed JSON sub-objects read as absent."""
    value: JsonObject = {k: _json(v) for k, v in row.items() if k != "metadata_json"}
    value["metadata"] = _json(row["metadata_json"])
    return record_from_json(value)


def _json(value: Any) -> JsonValue:
    return cast(JsonValue, value)


def _object(value: Any) -> JsonObject:
    return dict(value) if isinstance(value, dict) else {}


def place_row(place: PlaceRecord) -> Row:
    """The ``places`` row of a place record."""
    return {
        "key": place.key,
        "kind": place.kind,
        "name": place.name,
        "root": place.root,
        "metadata_json": dict(place.metadata),
        "created_at": place.created_at,
        "updated_at": place.updated_at,
    }


def place_from_row(row: RowMapping) -> PlaceRecord:
    """A place record from its row."""
    kind: PlaceKind = "window" if row["kind"] == "window" else "workspace"
    return PlaceRecord(
        key=row["key"],
        kind=kind,
        name=row["name"],
        root=row["root"],
        metadata=_object(row["metadata_json"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def workspace_row(workspace: WorkspaceRecord) -> Row:
    """The ``workspaces`` row of a workspace."""
    return {
        "id": workspace.id,
        "position": workspace.position,
        "name": workspace.name,
        "root": workspace.root,
        "created_at": workspace.created_at,
    }


def workspace_from_row(row: RowMapping) -> WorkspaceRecord:
    """A workspace from its row."""
    return WorkspaceRecord(
        id=row["id"],
        position=int(row["position"]),
        name=row["name"],
        root=row["root"],
        created_at=float(row["created_at"]),
    )


class SqlSessionRepository:
    """The ``SessionRepository`` port over an async SQLAlchemy engine (SQLite or PostgreSQL).

    The database engine is the caller's: this class neither creates the schema (use
    ``metadata.create_all`` or the Alembic migrations) nor disposes it.
    """

    def __init__(self, db_engine: AsyncEngine, committer: GroupCommitter | None = None) -> None:
        self._db_engine = db_engine
        self._committer = committer
        dialect = db_engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            raise Unavailable(f"unsupported database dialect {dialect!r}: use SQLite or PostgreSQL")
        self._dialect = dialect

    async def load(self) -> StoredState:
        """Read every session, place, workspace and generation."""
        async with self._db_engine.connect() as conn:
            sessions = (await conn.execute(select(sessions_table))).mappings().all()
            places = (await conn.execute(select(places_table))).mappings().all()
            workspaces = (await conn.execute(select(workspaces_table))).mappings().all()
            generations = (await conn.execute(select(generations_table))).all()
        return StoredState(
            sessions=tuple(session_from_row(r) for r in sessions),
            places=tuple(place_from_row(r) for r in places),
            workspaces=tuple(workspace_from_row(r) for r in workspaces),
            generations=tuple((str(sid), int(gen)) for sid, gen in generations),
        )

    async def apply(self, change: StoreChange, *, lazy: bool = False) -> None:
        """Write ``change`` in one transaction: deletions first, then upserts, table by table.

        ``lazy`` (turn bookkeeping): with a group committer, it may share the next transaction
        of a write that is waited for (``GroupCommitter.run(..., lazy=True)``)."""
        if change.is_empty():
            return
        if self._committer is not None:
            joins = self._joins(change)
            await self._committer.run(
                lambda conn: self._apply(conn, change), lazy=lazy, one_statement=joins,
                piece=(lambda conn: self._piece(conn, change)) if joins else None,
            )
            return
        async with self._db_engine.begin() as conn:
            await conn.run_sync(self._apply, change)

    def hurry(self) -> None:
        """Commit the lazy writes waiting for company now."""
        if self._committer is not None:
            self._committer.hurry()

    def _joins(self, change: StoreChange) -> bool:
        """Whether ``_apply`` writes ``change`` in one statement that ``_piece`` gives as a ``Piece`` (it can
        join other writes in one statement: ``GroupCommitter.run(piece=...)``)."""
        return False

    def _piece(self, conn: Connection, change: StoreChange) -> Piece:
        raise NotImplementedError  # only when ``_joins``

    def _apply(self, conn: Connection, change: StoreChange) -> None:
        self._delete(conn, sessions_table, "id", change.deleted_sessions)
        self._upsert_sessions(conn, [session_row(r) for r in change.sessions])
        self._delete(conn, places_table, "key", change.deleted_places)
        self._upsert(conn, places_table, ("key",), [place_row(p) for p in change.places])
        self._delete(conn, workspaces_table, "id", change.deleted_workspaces)
        self._upsert(conn, workspaces_table, ("id",), [workspace_row(w) for w in change.workspaces])
        rows = [{"session_id": sid, "generation": gen} for sid, gen in change.generations]
        self._upsert(conn, generations_table, ("session_id",), rows)

    @staticmethod
    def _delete(conn: Connection, table: Table, key: str, values: Sequence[str]) -> None:
        if values:
            conn.execute(delete(table).where(table.c[key].in_(list(values))))

    def _upsert(self, conn: Connection, table: Table, keys: tuple[str, ...], rows: list[Row]) -> None:
        if not rows:
            return
        sql, values = self._upsert_statement(conn, table, keys, rows)
        run_rows(conn, sql, values)

    def _upsert_sessions(self, conn: Connection, rows: list[Row]) -> None:
        """Upsert session rows; on SQLite without naming the indexed columns unless they changed (``SESSION_INDEXED``)."""
        if not rows:
            return
        if self._dialect != "sqlite":
            self._upsert(conn, sessions_table, ("id",), rows)
            return
        sql, values = self._upsert_statement(conn, sessions_table, ("id",), rows, kept=SESSION_INDEXED)
        run_rows(conn, sql, values)
        t = sessions_table
        # Bound by name twice each (the SET, then the WHERE): the tuple repeats them in that order.
        binds = (*SESSION_INDEXED, "id", *SESSION_INDEXED)

        def build() -> Any:
            changed = or_(*(t.c[name].is_distinct_from(bindparam(name)) for name in SESSION_INDEXED))
            return (
                update(t).where(t.c.id == bindparam("id"), changed)
                .values({name: bindparam(name) for name in SESSION_INDEXED})
            )

        moved = driver_sql(conn, "move sessions", build, binds)
        run_rows(conn, moved, [tuple(row.get(name) for name in binds) for row in rows])

    def _upsert_statement(
        self, conn: Connection, table: Table, keys: tuple[str, ...], rows: list[Row], kept: tuple[str, ...] = (),
    ) -> tuple[str, list[tuple[Any, ...]]]:
        """The upsert's SQL text in the dialect's parameter style and each row's values in its bind order.

        ``kept``: columns an existing row keeps (not in the update's SET; inserted with a new row)."""
        names, json_at = _columns(table)

        def build() -> Any:
            stmt = upsert_insert(self._dialect)(table)
            updates = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys and c.name not in kept}
            return stmt.on_conflict_do_update(index_elements=list(keys), set_=updates)

        name = f"upsert {table.name}" + (f" keeping {','.join(kept)}" if kept else "")
        sql = driver_sql(conn, name, build, names, column_keys=names)
        return sql, [_bound(row, names, json_at) for row in rows]


def _bound(row: Row, names: tuple[str, ...], json_at: tuple[int, ...]) -> tuple[Any, ...]:
    """``row`` in column order, bound as the columns' types would: JSON columns as text, None as
    SQL NULL (none_as_null)."""
    values = [row.get(name) for name in names]
    for i in json_at:
        value = values[i]
        if value is not None:
            values[i] = json_text(value)
    return tuple(values)


_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {}


def _columns(table: Table) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The table's column names in order, and the positions of its JSON columns."""
    columns = _COLUMNS.get(table.name)
    if columns is None:
        for c in table.columns:
            if isinstance(c.type, JSON) and not c.type.none_as_null:
                raise RuntimeError(f"{table.name}.{c.name}: a JSON column without none_as_null binds None as 'null'")
        columns = _COLUMNS[table.name] = (
            tuple(c.name for c in table.columns),
            tuple(i for i, c in enumerate(table.columns) if isinstance(c.type, JSON)),
        )
    return columns

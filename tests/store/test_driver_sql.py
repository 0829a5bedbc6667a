"""core/store/driver_sql.py ``run_rows`` on a real SQLite file: the pysqlite fast path writes in the
caller's transaction, raises SQLAlchemy's own errors and is seen by ``before_cursor_execute``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, event
from sqlalchemy.exc import IntegrityError

from core.store.driver_sql import run_rows

INSERT = "INSERT INTO t (k, v) VALUES (?, ?)"


def _engine(tmp_path: Path) -> Any:
    engine = create_engine(f"sqlite:///{tmp_path / 'd.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    return engine


def _rows(engine: Any) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql("SELECT k, v FROM t ORDER BY k").all()]


def test_rows_are_written_in_the_callers_transaction_and_counted(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    seen: list[tuple[str, Any]] = []

    def listener(conn: Connection, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", listener)
    with engine.connect() as conn:
        with conn.begin():
            run_rows(conn, INSERT, [(1, "a"), (2, "b")])
        with conn.begin() as rolled_back:
            run_rows(conn, INSERT, [(3, "c")])
            rolled_back.rollback()
    assert _rows(engine) == [(1, "a"), (2, "b")]
    assert [(s, list(p)) for s, p in seen if s == INSERT] == [(INSERT, [(1, "a"), (2, "b")]), (INSERT, [(3, "c")])]


def test_a_constraint_violation_is_sqlalchemys_integrity_error(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.connect() as conn, conn.begin():
        run_rows(conn, INSERT, [(1, "a")])
        with pytest.raises(IntegrityError):
            run_rows(conn, INSERT, [(1, "again")])


def test_without_a_transaction_sqlalchemy_begins_it(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with engine.connect() as conn:
        run_rows(conn, INSERT, [(1, "a")])
        conn.commit()
    assert _rows(engine) == [(1, "a")]

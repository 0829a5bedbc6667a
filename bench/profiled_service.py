"""``python -m bench.profiled_service``: ``turnstile run`` with cProfile and SQL counters (bench/hotpath.py).

The service is the unmodified ``consumers.cli run``; this wrapper only adds, in-process:

- SQLAlchemy event listeners on the ``Engine`` class (every engine, the async ones' sync
  engines included): statements by verb and table, and commits;
- a ``cProfile.Profile`` of the main thread (the event loop: nats-py, FastStream, the
  turn, SQLAlchemy's async front; aiosqlite's worker thread is not in it, its CPU is
  measured per thread from outside by the bench).

With ``BENCH_TIME_OPENS`` set (bench/cold.py) it also times, in the window, every open of an
unloaded session (``TurnRunner.load`` that had no engine loaded) and the two reads inside it
(``Publisher.last_checkpoint``, ``SqlHistoryJournal.load``): wall ms each, from ``time.perf_counter``.
With ``BENCH_MARKS`` set (``bench.timeline --marks``) it records wall-clock marks on a message's
serial path (bench/service_marks.py) into the counters' ``marks``.

SIGUSR1 resets the counters and starts the profiler (the measured window opens);
SIGUSR2 stops it and writes ``$BENCH_PROFILE_OUT`` (pstats) and ``$BENCH_PROFILE_OUT.json``
(counters), so start-up and shutdown are not in the figures. With ``BENCH_PROFILE_OFF`` set the
profiler stays off (the CPU figures are then those of the unprofiled service).
"""

from __future__ import annotations

import cProfile
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import Engine

from bench.ablation import ablate
from bench.service_marks import ServiceMarks

_TABLE = re.compile(r"\b(?:INTO|UPDATE|FROM)\s+\"?(\w+)", re.IGNORECASE)
_WRITTEN = re.compile(r"\bINSERT\s+INTO\s+\"?(\w+)", re.IGNORECASE)  # every table a data-modifying WITH writes


class SqlCounter:
    """Statements by ``VERB table`` and commits, counted while ``active``.

    Also a commit log for bench/timeline.py: per commit (wall time of the transaction's first
    write, wall time of the commit call, tables written, and, for the group committer's
    transactions, wall time the commit returned: ``install_committed``), in ``time.time()``, the
    clock the bench stamps its NATS observations with.
    """

    def __init__(self) -> None:
        self.active = False
        self.statements: Counter[str] = Counter()
        self.commits = 0
        self.commit_log: list[list[Any]] = []
        self._written: dict[int, tuple[float, set[str]]] = {}  # per connection: first write, tables

    def on_execute(self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if not self.active:
            return
        verb = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "?"
        m = _TABLE.search(statement)
        self.statements[f"{verb} {m.group(1) if m else ''}".strip()] += 1
        if m and verb in ("INSERT", "UPDATE", "DELETE"):
            self._written.setdefault(id(conn), (time.time(), set()))[1].add(m.group(1))
        elif m and verb == "WITH":  # a data-modifying WITH: an upsert + notify, or writes joined in one statement
            self._written.setdefault(id(conn), (time.time(), set()))[1].update(_WRITTEN.findall(statement))

    def on_commit(self, conn: Any) -> None:
        if self.active:
            self.commits += 1
            first, tables = self._written.pop(id(conn), (None, set()))
            now = time.time()
            self.commit_log.append([first or now, now, sorted(tables)])

    def install_committed(self) -> None:
        """Stamp each group transaction's commit log entry with the wall time its commit returned
        (on PostgreSQL the commit call is a round trip with the server's fsync)."""
        from core.store.committer import GroupCommitter

        counter = self
        transaction = GroupCommitter._transaction

        async def timed(self: GroupCommitter, ops: list[Any]) -> list[Any]:
            logged = len(counter.commit_log)
            try:
                return await transaction(self, ops)
            finally:
                if counter.active and len(counter.commit_log) == logged + 1:
                    counter.commit_log[logged].append(time.time())

        def autocommitted(method: Any) -> Any:
            # PostgreSQL autocommit (a lone one-statement write, or a batch of writes joined in one
            # statement): no commit event; logged as a commit whose call and return are the statement's answer.
            async def timed_statement(self: GroupCommitter, arg: Any) -> Any:
                before = set(counter._written)
                try:
                    return await method(self, arg)
                finally:
                    now = time.time()
                    for key in set(counter._written) - before:
                        first, tables = counter._written.pop(key)
                        if counter.active:
                            counter.commits += 1
                            counter.commit_log.append([first, now, sorted(tables), now])

            return timed_statement

        GroupCommitter._transaction = timed  # type: ignore[method-assign]
        GroupCommitter._statement = autocommitted(GroupCommitter._statement)  # type: ignore[method-assign]
        GroupCommitter._joined = autocommitted(GroupCommitter._joined)  # type: ignore[method-assign]


class PgTrips:
    """PostgreSQL round trips while ``active``, by kind (asyncpg calls that each wait for the server:
    ``BEGIN``/``COMMIT``/``ROLLBACK`` and other simple queries, a prepared statement's execution, an
    ``executemany``, a prepare). A load-independent count of what a message waits for on PostgreSQL."""

    def __init__(self) -> None:
        self.active = False
        self.trips: Counter[str] = Counter()

    def install(self) -> None:
        try:
            from asyncpg.connection import Connection
            from asyncpg.prepared_stmt import PreparedStatement
        except ImportError:
            return
        trips = self

        def counted(cls: Any, name: str, kind: Any) -> None:
            fn = getattr(cls, name)

            async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                if trips.active:
                    trips.trips[kind(args)] += 1
                return await fn(self, *args, **kwargs)

            setattr(cls, name, wrapper)

        counted(Connection, "execute", lambda a: str(a[0]).split(None, 1)[0].upper().rstrip(";") if a else "execute")
        counted(Connection, "executemany", lambda _a: "executemany")
        counted(Connection, "_prepare", lambda _a: "prepare")
        counted(PreparedStatement, "_PreparedStatement__bind_execute", lambda _a: "statement")
        counted(Connection, "fetchrow", lambda _a: "statement")  # the group committer's pieces (``send_pieces``)
        counted(PreparedStatement, "executemany", lambda _a: "executemany")


class OpenTimer:
    """Wall time of each cold open and of the reads in it, while ``active`` (BENCH_TIME_OPENS)."""

    def __init__(self) -> None:
        self.active = False
        self.times: dict[str, list[float]] = {"open": [], "checkpoint_get": [], "journal_read": [], "journal_read_ahead": []}

    def install(self) -> None:
        from consumers.publisher import Publisher
        from consumers.turn_runner import TurnRunner
        from core.store.journal_repo import SqlHistoryJournal

        timer = self

        def timed(kind: str, fn: Any, only: Any = None) -> Any:
            async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                if not timer.active or (only is not None and not only(self)):
                    return await fn(self, *args, **kwargs)
                t0 = time.perf_counter()
                try:
                    return await fn(self, *args, **kwargs)
                finally:
                    timer.times[kind].append((time.perf_counter() - t0) * 1000)

            return wrapper

        TurnRunner.load = timed("open", TurnRunner.load, lambda runner: runner._engine is None)  # type: ignore[method-assign]
        Publisher.last_checkpoint = timed("checkpoint_get", Publisher.last_checkpoint)  # type: ignore[method-assign]
        SqlHistoryJournal.load = timed("journal_read", SqlHistoryJournal.load)  # type: ignore[method-assign]
        SqlHistoryJournal.newest = timed("journal_read_ahead", SqlHistoryJournal.newest)  # type: ignore[method-assign]


def main() -> None:
    out = Path(os.environ["BENCH_PROFILE_OUT"])
    ablate(os.environ.get("BENCH_ABLATE", ""))  # bench/ablation.py: parts of the shell switched off
    opens = OpenTimer()
    if os.environ.get("BENCH_TIME_OPENS"):
        opens.install()
    sql = SqlCounter()
    marks = ServiceMarks()
    if os.environ.get("BENCH_MARKS"):
        marks.install()
    event.listen(Engine, "before_cursor_execute", sql.on_execute)
    event.listen(Engine, "commit", sql.on_commit)
    sql.install_committed()
    pg = PgTrips()
    pg.install()
    profiler = cProfile.Profile()

    def start(_sig: int, _frame: FrameType | None) -> None:
        sql.statements.clear()
        sql.commits = 0
        sql.commit_log.clear()
        sql.active = True
        pg.trips.clear()
        pg.active = True
        for values in opens.times.values():
            values.clear()
        opens.active = True
        marks.marks.clear()
        marks.active = True
        if not os.environ.get("BENCH_PROFILE_OFF"):  # hotpath --no-profile: counters and CPU only
            profiler.enable()

    def stop(_sig: int, _frame: FrameType | None) -> None:
        profiler.disable()
        sql.active = False
        pg.active = False
        opens.active = False
        marks.active = False
        profiler.dump_stats(str(out))
        data = {
            "sql_statements": dict(sql.statements), "sql_commits": sql.commits, "commit_log": sql.commit_log,
            "pg_round_trips": dict(pg.trips),
            "open_ms": opens.times,
            "marks": marks.marks,
        }
        Path(str(out) + ".json").write_bytes(orjson.dumps(data))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from consumers.cli import main as cli_main

    sys.exit(cli_main(["run"]))


if __name__ == "__main__":
    main()

"""When and how a SQLite file's WAL is copied into the database file: never by a commit.

The group committer's writer connection sets ``wal_autocheckpoint=0`` (core/store/db.py), so no
commit stalls on a checkpoint's fsync of the database file. ``WalCheckpoints`` starts a PASSIVE
checkpoint (it never blocks a writer) in a thread of its own after ``WAL_CHECKPOINT_EVERY``
transactions or ``WAL_CHECKPOINT_EVERY_OPS`` operations since the last one started, one at a time.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

# A background WAL checkpoint starts after this many transactions or operations since the last
# one, whichever comes first: each copies and fsyncs a bounded part of the WAL (a backlog's large
# group transactions reach the operation count first), since its fsync holds up the broker's own.
WAL_CHECKPOINT_EVERY = 100
WAL_CHECKPOINT_EVERY_OPS = 1000


class WalCheckpoints:
    """The WAL checkpoints of one SQLite file, counted per committed transaction."""

    def __init__(self, database: str) -> None:
        self._database = database
        # Its own thread: a checkpoint's fsync (tens of ms after a busy spell) must not hold up a
        # transaction that waits in the writer's thread.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-checkpoint")
        self._since = (0, 0)  # (transactions, operations) since a checkpoint started
        self.running: asyncio.Future[None] | None = None  # the checkpoint under way, if any

    def committed(self, loop: asyncio.AbstractEventLoop, operations: int) -> None:
        """Count a committed transaction of ``operations`` writes; start a checkpoint when one is due."""
        transactions, written = self._since[0] + 1, self._since[1] + operations
        self._since = (transactions, written)
        if transactions < WAL_CHECKPOINT_EVERY and written < WAL_CHECKPOINT_EVERY_OPS:
            return
        if self.running is not None and not self.running.done():
            return
        self._since = (0, 0)
        self.running = loop.run_in_executor(self._thread, self._checkpoint)

    def shutdown(self) -> None:
        """Release the thread; a checkpoint under way finishes first."""
        self._thread.shutdown(wait=True)

    def _checkpoint(self) -> None:
        try:
            with sqlite3.connect(self._database, timeout=0) as conn:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            log.debug("WAL checkpoint skipped: %r", exc)

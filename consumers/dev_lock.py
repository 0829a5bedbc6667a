"""One ``make run`` per store and database: an exclusive lock file next to each (released when the process ends).

``flock`` locks die with their process, so a crashed run leaves no stale lock behind; the file keeps
the holder's pid for the message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from sqlalchemy.engine import make_url


class InstanceLocked(RuntimeError):
    """Raised when another running instance holds the lock on a store or database."""


class InstanceLock:
    """Exclusive, non-blocking locks on a set of files; ``release`` (or process exit) frees them."""

    def __init__(self) -> None:
        self._held: list[IO[str]] = []

    def acquire(self, path: Path, what: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held open for the life of the process
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise InstanceLocked(
                f"{what} is in use by another running turnstile (pid {holder}, lock {path}); stop it, or give this "
                f"one its own with TURNSTILE_DEV_STORE_DIR / TURNSTILE_DATABASE_URL"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._held.append(handle)

    def release(self) -> None:
        for handle in self._held:
            handle.close()
        self._held.clear()


def sqlite_file(database_url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def lock_dev_instance(store_dir: Path | None, database_url: str) -> InstanceLock:
    """Lock the nats store (when we start the server) and the SQLite database of this ``make run``."""
    lock = InstanceLock()
    try:
        if store_dir is not None:
            lock.acquire(store_dir / "turnstile-dev.lock", f"the nats store {store_dir}")
        db = sqlite_file(database_url)
        if db is not None:
            lock.acquire(db.with_name(db.name + ".lock"), f"the database {db}")
    except InstanceLocked:
        lock.release()
        raise
    return lock

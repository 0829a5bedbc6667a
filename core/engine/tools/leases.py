"""Session-scoped leases on files written by managed development tools (KS-19).

A path leased by one managed-source session cannot be written by another until
the holder calls ``release_managed_sources``. The port is ``FileLeases``; the
service uses the SQL store (``core.store.lease_repo.SqlFileLeases``) so that a
lease outlives the process — a turn resumed after a crash, or by another worker,
still holds its write lease. ``LeaseRegistry`` is the in-process implementation.
"""

from __future__ import annotations

from typing import Protocol

from core.errors import Conflict


class FileLeases(Protocol):
    """Which managed-source session holds which path."""

    async def acquire(self, holder: str, path: str) -> None:
        """Lease ``path`` for ``holder`` (again is fine); Conflict when another holder has it."""
        ...

    async def held_by(self, holder: str) -> list[str]:
        """Paths ``holder`` leases, sorted."""
        ...

    async def release_all(self, holder: str) -> int:
        """Release every lease of ``holder``; the number released."""
        ...


class LeaseRegistry:
    """``FileLeases`` in one process's memory (tests, embedded use without a store)."""

    def __init__(self) -> None:
        self._holder_of: dict[str, str] = {}

    async def acquire(self, holder: str, path: str) -> None:
        current = self._holder_of.get(path)
        if current is not None and current != holder:
            raise Conflict(f"{path} is leased by another session")
        self._holder_of[path] = holder

    async def held_by(self, holder: str) -> list[str]:
        return sorted(p for p, h in self._holder_of.items() if h == holder)

    async def release_all(self, holder: str) -> int:
        paths = await self.held_by(holder)
        for path in paths:
            del self._holder_of[path]
        return len(paths)

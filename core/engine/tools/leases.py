"""Session-scoped leases on files written by managed development tools (KS-19)."""

from __future__ import annotations

from core.errors import Conflict


class LeaseRegistry:
    """Which managed-source session holds which path. Share one per process.

    A path leased by one session cannot be written by another until the holder
    calls ``release_managed_sources`` (``release_all``).
    """

    def __init__(self) -> None:
        self._holder_of: dict[str, str] = {}

    def acquire(self, holder: str, path: str) -> None:
        """Lease ``path`` for ``holder``; Conflict when another holder has it."""
        current = self._holder_of.get(path)
        if current is not None and current != holder:
            raise Conflict(f"{path} is leased by another session")
        self._holder_of[path] = holder

    def held_by(self, holder: str) -> list[str]:
        """Paths ``holder`` leases, sorted."""
        return sorted(p for p, h in self._holder_of.items() if h == holder)

    def release_all(self, holder: str) -> int:
        """Release every lease of ``holder``; the number released."""
        paths = self.held_by(holder)
        for path in paths:
            del self._holder_of[path]
        return len(paths)

"""Giving the C heap's free pages back to the system after a batch of unloaded sessions (glibc only).

glibc's malloc keeps what a process freed for its next allocations: the pages of a heap that held
a burst's working set (buffers and objects over pymalloc's 512 B: deque blocks, large dicts, JSON
payloads) stay resident after the burst, interleaved with what is still live, so the service's RSS
stays at the burst's high-water mark. ``malloc_trim(0)`` returns every whole free page inside the
heaps (``MADV_DONTNEED``), not only the top. ``HeapTrim`` calls it once per ``every`` session actors
unloaded (``ActorRegistry``): at 10,000 sessions drained, ~40 calls, each well under a millisecond
(bench/README.md, the `rss` branch's third pass). pymalloc's own arenas are not glibc's and are not
touched. Elsewhere than glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import platform
import time
from collections.abc import Callable

UNLOADS_PER_TRIM = 256  # the default cap of loaded sessions: a trim per cap's worth of sessions replaced

def _glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None when the C library is another one."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrim:
    """Counts unloaded sessions; every ``every``-th gives the heap's free pages back (``malloc_trim(0)``)."""

    def __init__(self, every: int = UNLOADS_PER_TRIM, trim: Callable[[int], int] | None = None) -> None:
        self._every = max(every, 1)
        self._trim = trim if trim is not None else _glibc_malloc_trim()
        self._unloaded = 0
        self.trims = 0  # calls made (bench/memory_service.py reads them, with ``seconds``)
        self.seconds = 0.0

    def unloaded(self) -> None:
        """One session actor ended and its loaded state was dropped."""
        if self._trim is None:
            return
        self._unloaded += 1
        if self._unloaded < self._every:
            return
        self._unloaded = 0
        started = time.perf_counter()
        self._trim(0)
        self.seconds += time.perf_counter() - started
        self.trims += 1

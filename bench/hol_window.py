"""Pure arithmetic of the head-of-line phase: when paced traffic stops, and what overlapped what.

Standard library only (no NATS, no psutil), so unit tests import it directly.
Times are seconds on one clock (the caller's ``time.perf_counter()``).
"""

from __future__ import annotations

from collections.abc import Iterable


def paced_should_stop(
    elapsed_s: float, deletion_done_s: float | None, min_s: float, tail_s: float, max_s: float
) -> bool:
    """Whether the paced traffic stops before the message scheduled at ``elapsed_s``.

    It runs at least ``min_s``; while a deletion is in flight (``deletion_done_s`` None)
    it keeps going, and after the deletion ended (``deletion_done_s`` seconds after the
    start) for another ``tail_s``, so the messages queued behind it are measured too;
    never past ``max_s``. Without a deletion pass ``deletion_done_s=0``.
    """
    if elapsed_s >= max_s:
        return True
    if deletion_done_s is None:
        return False
    return elapsed_s >= max(min_s, deletion_done_s + tail_s)


def overlap_s(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Length of the intersection of the intervals ``a`` and ``b`` (0 when they are disjoint)."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def covered_fraction(inner: tuple[float, float], outer: tuple[float, float]) -> float:
    """Share of ``inner`` that lies inside ``outer`` (1.0 for an empty ``inner`` inside ``outer``)."""
    length = inner[1] - inner[0]
    if length <= 0:
        return 1.0 if outer[0] <= inner[0] <= outer[1] else 0.0
    return overlap_s(inner, outer) / length


def latencies_sent_within(
    samples: Iterable[tuple[float, float]], start: float, end: float
) -> tuple[list[float], list[float]]:
    """Split (sent, replied) pairs into latencies of messages sent inside [start, end] and the rest."""
    inside: list[float] = []
    outside: list[float] = []
    for sent, got in samples:
        (inside if start <= sent <= end else outside).append(got - sent)
    return inside, outside


def slowest(samples: Iterable[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    """The ``n`` samples ``(sent, got)`` with the longest latency, in sending order (where a stall lies)."""
    return sorted(sorted(samples, key=lambda s: s[1] - s[0])[-n:]) if n > 0 else []

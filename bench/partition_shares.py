"""When the scale-out phase's workers share the partitions evenly (bench/scaleout.py opens its window then).

Kept apart from bench/scaleout.py, which imports the bench's scenarios (and with them LangGraph, a bench-only
dependency), so ``make test`` can check it without the bench's packages.
"""

from __future__ import annotations

from collections import Counter

from consumers.partitions import fair_share

PARTITIONS = 16  # the scale-out phase's inbound partition count (TURNSTILE_PARTITIONS)


def shared_evenly(owners: dict[int, bytes], workers: int, partitions: int = PARTITIONS) -> bool:
    """Every partition has an owner, ``workers`` processes own them, and none owns more than its fair share
    (``consumers.partitions.fair_share``): the hand-over of a joining worker is over. Until 2026-12-06 the
    window opened once two owners existed, and in 2 of 4 runs the second held 4 of the 16 partitions then:
    the other 4 moved to it during the drain."""
    if len(owners) != partitions:
        return False
    held = Counter(owners.values())
    return len(held) == workers and max(held.values()) <= fair_share(partitions, workers)

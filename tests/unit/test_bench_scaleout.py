"""bench/partition_shares.py (bench/scaleout.py): the window opens once the partitions are shared evenly, not as soon as two workers own some."""

from __future__ import annotations

from bench.partition_shares import shared_evenly


def _owners(split: list[int]) -> dict[int, bytes]:
    """16 partitions held as ``split`` says: worker i holds split[i] of them."""
    owners: dict[int, bytes] = {}
    for worker, count in enumerate(split):
        for _ in range(count):
            owners[len(owners)] = f"w{worker}".encode()
    return owners


def test_a_joining_worker_still_taking_its_share_is_not_even() -> None:
    assert not shared_evenly(_owners([12, 4]), 2)  # the split the old check accepted in 2 of 4 runs
    assert not shared_evenly(_owners([9, 7]), 2)


def test_each_worker_at_its_fair_share_is_even() -> None:
    assert shared_evenly(_owners([8, 8]), 2)
    assert shared_evenly(_owners([16]), 1)
    assert shared_evenly(_owners([6, 5, 5]), 3)  # fair share ceil(16 / 3) = 6


def test_an_unowned_partition_or_a_missing_worker_is_not_shared() -> None:
    owners = _owners([8, 8])
    del owners[3]
    assert not shared_evenly(owners, 2)
    assert not shared_evenly(_owners([16]), 2)

"""A served process fixes glibc's allocator thresholds (TURNSTILE_MALLOC_MMAP_THRESHOLD): a growing
checkpoint's buffers are then reused from the heap instead of mapped afresh, page by page."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from consumers.malloc_tuning import tune_malloc
from consumers.settings import Settings

# In a fresh interpreter: optionally tune, then build a growing ~240 kB buffer and its copy for the
# socket 200 times, as every checkpoint of a growing session is built; print the page faults per round.
GROWING_CHECKPOINTS = """
import resource, sys
from consumers.malloc_tuning import tune_malloc
threshold = int(sys.argv[1])
applied = tune_malloc(threshold)
pieces = [b"x" * 700 for _ in range(340)]
rounds = 200
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(rounds):
    pieces.append(b"y" * 40)
    snapshot = b"".join(pieces)
    written = b"".join([b"envelope", snapshot, b"}"])
    del written, snapshot
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(applied, faults / rounds)
"""


def _faults_per_checkpoint(threshold: int) -> tuple[bool, float]:
    out = subprocess.run(
        [sys.executable, "-c", GROWING_CHECKPOINTS, str(threshold)],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2],
    ).stdout.split()
    return out[0] == "True", float(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_a_growing_checkpoint_reuses_heap_memory_instead_of_faulting_in_fresh_pages() -> None:
    applied, tuned = _faults_per_checkpoint(Settings().malloc_mmap_threshold)
    kept, untuned = _faults_per_checkpoint(0)
    assert applied and not kept
    # glibc's rule: each buffer a little larger than the last freed one, so a fresh mapping whose
    # 4 kB pages fault in as they are written (~95 a round for the two buffers, measured); fixed
    # thresholds: the freed heap blocks are reused.
    assert untuned > 30
    assert tuned < 3


def test_zero_keeps_the_allocator_as_it_is() -> None:
    assert tune_malloc(0) is False

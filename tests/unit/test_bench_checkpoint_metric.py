"""The bench counts turnstile's checkpoints from the service's own histogram, not from a subscriber's copies."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench.driver import CheckpointBytesMetric, checkpoint_bytes_metric
from bench.shape import STORE_HEADER_OVERHEAD, STORE_RECORD_OVERHEAD
from consumers.publisher import FENCE_HEADER


def test_the_histogram_count_and_sum_are_read_from_an_exposition() -> None:
    registry = CollectorRegistry()
    sizes = Histogram("turnstile_checkpoint_bytes", "size of a published checkpoint", registry=registry)
    other = Histogram("turnstile_checkpoint_publish_seconds", "not this one", registry=registry)
    for size in (2_600, 115_000, 250_001):
        sizes.observe(size)
    other.observe(0.5)
    assert checkpoint_bytes_metric(generate_latest(registry).decode()) == (3, 367_601.0)
    assert checkpoint_bytes_metric("") == (0, 0.0)  # nothing published yet


async def test_a_fenced_record_is_sized_as_the_file_store_keeps_it(monkeypatch: Any) -> None:
    # The file store keeps a record's subject, its header block and its payload, plus a fixed overhead
    # (bench/shape.py); the baseline's payloads are sized back from it with the same constants.
    subject = "ts-ab12.checkpoint.bench-0a1b2c3d-7"
    metric = CheckpointBytesMetric("http://127.0.0.1:1/metrics", len(subject))
    exposition = "turnstile_checkpoint_bytes_count 2.0\nturnstile_checkpoint_bytes_sum 230000.0\n"
    monkeypatch.setattr(metric, "_read", lambda: exposition)
    record = STORE_RECORD_OVERHEAD + len(subject) + STORE_HEADER_OVERHEAD + len(FENCE_HEADER % 1234)
    assert await metric.snapshot() == (2, 230_000 + 2 * record)

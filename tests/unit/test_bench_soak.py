"""bench/soak.py: the figures read from /metrics, and the verdict of a long low-load run."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge, GCCollector, ProcessCollector, generate_latest

from bench.soak import service_figures, slope_per_hour, verdict


def test_service_figures_read_the_collections_per_generation_the_actors_and_the_rss() -> None:
    registry = CollectorRegistry()
    GCCollector(registry=registry)
    ProcessCollector(registry=registry)
    Gauge("turnstile_active_actors", "actors", registry=registry).set(256)
    figures = service_figures(generate_latest(registry).decode())
    assert set(figures) == {"gc0", "gc1", "gc2", "actors", "rss_bytes"}
    assert figures["actors"] == 256
    assert figures["rss_bytes"] > 1_000_000
    assert figures["gc0"] >= figures["gc1"] >= figures["gc2"] >= 0


def test_slope_per_hour_is_the_least_squares_slope() -> None:
    assert slope_per_hour([(0.0, 100.0), (1800.0, 101.0), (3600.0, 102.0)]) == pytest.approx(2.0)
    assert slope_per_hour([(0.0, 5.0), (60.0, 3.0), (120.0, 5.0)]) == pytest.approx(0.0)
    assert slope_per_hour([(10.0, 1.0)]) == 0.0
    assert slope_per_hour([(10.0, 1.0), (10.0, 2.0)]) == 0.0


def test_verdict_takes_the_slope_over_the_second_half_and_the_collections_over_the_run() -> None:
    mb = 1024 * 1024
    rows = [
        {"at_s": 60.0 * k, "rss_bytes": (100 + (10 if k < 2 else 0) + k) * mb, "sent": 300, "answered": 300,
         "gc0": 10.0 * k, "gc1": float(k // 2), "gc2": 0.0}
        for k in range(4)
    ]
    v = verdict(rows)
    assert v["rss_mb_first"] == 110 and v["rss_mb_last"] == 103 and v["rss_mb_max"] == 111
    assert v["rss_mb_per_hour_second_half"] == pytest.approx(60.0)  # 102 → 103 MB in a minute
    assert v["collections"] == {"0": 30.0, "1": 1.0, "2": 0.0}
    assert (v["answered"], v["sent"]) == (1200, 1200)
    assert verdict([]) == {}

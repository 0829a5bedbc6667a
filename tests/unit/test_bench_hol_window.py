"""The head-of-line bench phase's window arithmetic (bench/hol_window.py, standard library only)."""

from __future__ import annotations

import pytest

from bench.hol_window import covered_fraction, latencies_sent_within, overlap_s, paced_should_stop, slowest


def test_paced_traffic_without_a_deletion_stops_after_the_minimum() -> None:
    assert not paced_should_stop(1.9, 0.0, min_s=2.0, tail_s=1.0, max_s=30.0)
    assert paced_should_stop(2.0, 0.0, min_s=2.0, tail_s=1.0, max_s=30.0)


def test_paced_traffic_outlasts_a_running_deletion() -> None:
    assert not paced_should_stop(25.0, None, min_s=2.0, tail_s=1.0, max_s=30.0)


def test_paced_traffic_runs_a_tail_after_the_deletion_replied() -> None:
    assert not paced_should_stop(6.5, 6.0, min_s=2.0, tail_s=1.0, max_s=30.0)
    assert paced_should_stop(7.0, 6.0, min_s=2.0, tail_s=1.0, max_s=30.0)


def test_paced_traffic_never_passes_the_maximum() -> None:
    assert paced_should_stop(30.0, None, min_s=2.0, tail_s=1.0, max_s=30.0)


def test_overlap_of_intervals() -> None:
    assert overlap_s((0.0, 4.0), (1.0, 10.0)) == pytest.approx(3.0)
    assert overlap_s((0.0, 1.0), (2.0, 3.0)) == 0.0


def test_a_deletion_inside_the_window_is_fully_covered_and_one_past_its_end_partly() -> None:
    assert covered_fraction((1.0, 3.0), (0.0, 10.0)) == pytest.approx(1.0)
    assert covered_fraction((8.0, 12.0), (0.0, 10.0)) == pytest.approx(0.5)
    assert covered_fraction((11.0, 11.0), (0.0, 10.0)) == 0.0


def test_latencies_split_by_when_the_message_was_sent() -> None:
    inside, outside = latencies_sent_within([(0.5, 0.6), (1.0, 3.0), (2.0, 3.0), (5.0, 5.1)], 1.0, 4.0)
    assert inside == pytest.approx([2.0, 1.0])
    assert outside == pytest.approx([0.1, 0.1])


def test_slowest_samples_in_sending_order() -> None:
    samples = [(0.0, 0.01), (1.0, 1.3), (2.0, 2.02), (3.0, 3.2)]
    assert slowest(samples, 2) == [(1.0, 1.3), (3.0, 3.2)]
    assert slowest(samples, 0) == []

"""The served process tunes the cyclic garbage collector (TURNSTILE_GC_THRESHOLD)."""

from __future__ import annotations

import gc

from consumers.cli import collector_paused, tune_gc


def test_gc_threshold_is_applied_and_zero_keeps_the_interpreter_default() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(0)
        assert gc.get_threshold() == before
        tune_gc(12_345)
        assert gc.get_threshold()[0] == 12_345
        # A young collection pauses the loop for as long as it walks the young objects; a smaller
        # young threshold keeps pauses short without walking the older generations more often.
        young, middle, _ = gc.get_threshold()
        tune_gc(1_234)
        assert gc.get_threshold()[0] == 1_234
        assert abs(gc.get_threshold()[0] * gc.get_threshold()[1] - young * middle) <= young
        assert gc.get_freeze_count() > 0  # what lived at start-up is out of the collector's way
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_collector_is_paused_while_the_service_imports_and_left_as_it_was() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # a caller that had turned it off keeps it off
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()

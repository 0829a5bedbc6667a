"""The per-message timeline's arithmetic (bench/timeline.py: pure functions over marks)."""

from __future__ import annotations

import pytest

from bench.timeline import commit_marks, isolated, nats_kind, per_message, summarise


def test_nats_subjects_map_to_timeline_kinds() -> None:
    assert nats_kind("tl1", "$JS.ACK.TL1_INBOUND.turnstile-inbound.1.5.5.0.0") == "inbound ack"
    assert nats_kind("tl1", "tl1.checkpoint.abc") == "checkpoint"
    assert nats_kind("tl1", "tl1.events.abc.turn.started") == "event turn.started"
    assert nats_kind("tl1", "tl1.outbound.cli.abc") == "reply"
    assert nats_kind("tl1", "tl1.stream.abc") == "typing"
    assert nats_kind("tl1", "tl1.inbound.cli.abc") is None  # the origin comes from sent_at
    assert nats_kind("tl1", "other.checkpoint.abc") is None


def test_commit_marks_name_the_tables_written() -> None:
    assert commit_marks([[1.0, 1.001, ["inbox"]], [2.0, 2.0005, ["journal_entries", "sessions"]], [3.0, 3.0, []]]) == [
        (1.001, "commit[inbox]"),
        (2.0005, "commit[journal_entries+sessions]"),
        (3.0, "commit[no writes]"),
    ]


def test_each_mark_belongs_to_the_last_message_published_before_it_and_is_numbered_by_kind() -> None:
    marks = [(10.004, "checkpoint"), (10.002, "checkpoint"), (10.050, "reply"), (10.110, "checkpoint"), (9.0, "reply")]
    got = per_message([10.0, 10.1], marks)
    assert got[0] == pytest.approx({"checkpoint #1": 2.0, "checkpoint #2": 4.0, "reply #1": 50.0})
    assert got[1] == pytest.approx({"checkpoint #1": 10.0})  # the mark before the first publish is dropped


def test_summary_orders_marks_as_they_come_and_steps_are_per_message_medians() -> None:
    messages = [
        {"a #1": 1.0, "b #1": 3.0, "c #1": 10.0},
        {"a #1": 2.0, "b #1": 3.0, "c #1": 4.0},
        {"a #1": 1.0, "c #1": 6.0, "rare #1": 7.0},
    ]
    rows = summarise(messages, min_share=0.5)
    assert [r["mark"] for r in rows] == ["a #1", "b #1", "c #1"]  # "rare" is in 1 of 3 messages: left out
    by = {r["mark"]: r for r in rows}
    assert by["a #1"]["step_ms"] == 1.0 and by["a #1"]["median_ms"] == 1.0
    assert by["b #1"]["step_ms"] == pytest.approx(1.5)  # 2 and 1
    assert by["c #1"]["step_ms"] == pytest.approx(5.0)  # 7, 1 and (no b in the third message) 6 - 1 = 5
    assert by["b #1"]["share"] == pytest.approx(2 / 3)


def test_only_messages_that_ran_alone_are_kept() -> None:
    origins = [0.0, 1.0, 2.0, 3.0, 4.0]
    replies = [0.5, 2.5, 2.7, 3.5, None]  # the 2nd overlaps the 3rd; the 5th was never answered
    assert isolated(origins, replies) == [True, False, False, True, False]


async def test_service_marks_record_around_and_before_a_step_only_while_active() -> None:
    from bench.service_marks import ServiceMarks

    class Step:
        async def run(self, x: int) -> int:
            return x + 1

        async def send(self) -> None:
            return None

    marks = ServiceMarks()
    marks._around(Step, "run", "run")
    marks._before(Step, "send", "send>")
    assert await Step().run(1) == 2  # inactive: the step still runs, nothing is recorded
    assert marks.marks == []
    marks.active = True
    assert await Step().run(2) == 3
    await Step().send()
    assert [name for _, name in marks.marks] == ["run>", "run<", "send>"]
    times = [at for at, _ in marks.marks]
    assert times == sorted(times)


def test_the_floor_shape_takes_the_checkpoint_size_given() -> None:
    from bench.timeline import floor_shape

    shape = floor_shape(122_000.0)
    assert shape.streams["checkpoint"].stored_bytes_per_msg == 122_000.0
    assert shape.streams["checkpoint"].per_msg == 2.0

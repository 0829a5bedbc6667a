"""The soak's oracle itself: each clause notices its violation (synthetic stream contents, no server)."""

from __future__ import annotations

from typing import Any

from tests.soak.config import SoakConfig
from tests.soak.oracle import StreamFacts, evaluate, summary_table, unaccounted
from tests.soak.record import Deletion, Published, SoakRecord
from tests.soak.stored import StoredMessage

CONFIG = SoakConfig(seed=1, sessions=1, messages=3, kills=0, deletions=0, rate_per_s=1.0, drain_bound_s=1.0)


def published(n: int, sid: str = "s1", at: float = 0.0) -> Published:
    return Published(f"m{n}", sid, n, f"soak {sid} #{n}", inbound_seq=n + 1, sent_at=at + n, acked_at=at + n + 0.01)


def reply(
    seq: int, p: Published, generation: int = 0, stored_at: float = 100.0, turn: str | None = None
) -> StoredMessage:
    body: dict[str, Any] = {
        "session_id": p.session_id, "generation": generation, "turn_id": turn or f"turn-{p.msg_id}", "seq": 1,
        "reply_to": p.msg_id, "text": f"echo: {p.text}",
    }
    return StoredMessage(seq, stored_at, "p.outbound.cli.s1", body)


def event(seq: int, sid: str, data: dict[str, Any], stored_at: float = 100.0) -> StoredMessage:
    return StoredMessage(seq, stored_at, f"p.events.{sid}.x", {"session_id": sid, "data": data})


def record(msgs: list[Published], deletions: list[Deletion] | None = None) -> SoakRecord:
    rec = SoakRecord(CONFIG, "p", 0.0, published=msgs, deletions=deletions or [])
    rec.drained_after_s = 0.5
    return rec


def facts(replies: list[StoredMessage], dropped: list[StoredMessage] | None = None,
          deleted: list[StoredMessage] | None = None) -> StreamFacts:
    return StreamFacts(replies=replies, dropped=dropped or [], deleted=deleted or [], dead_letters=[])


def test_a_clean_run_passes_every_clause() -> None:
    msgs = [published(n) for n in range(3)]
    report = evaluate(record(msgs), facts([reply(i + 1, p) for i, p in enumerate(msgs)]))
    assert report.passed, summary_table(record(msgs), report)


def test_an_unanswered_message_and_a_second_answer_fail_clause_one() -> None:
    msgs = [published(n) for n in range(3)]
    got = facts([reply(1, msgs[0]), reply(2, msgs[1]), reply(3, msgs[1], turn="turn-again")])
    report = evaluate(record(msgs), got)
    assert report.unanswered == ["m2"] and report.duplicate_replies == 1
    assert unaccounted(msgs, got) == ["m2"]
    assert report.failed_clauses() == ["1 answered exactly once or dropped"]


def test_replies_out_of_publish_order_fail_clause_two() -> None:
    msgs = [published(n) for n in range(3)]
    report = evaluate(record(msgs), facts([reply(1, msgs[1]), reply(2, msgs[0]), reply(3, msgs[2])]))
    assert report.order_violations == 1
    assert report.failed_clauses() == ["2 per-session order"]


def test_an_old_generation_answer_stored_after_session_deleted_fails_clause_three() -> None:
    msgs = [published(n) for n in range(3)]
    deletion = Deletion("s1", requested_at=1.5, done_at=1.6, generation=7)
    deleted = [event(1, "s1", {"generation": 7}, stored_at=1.55)]
    dropped = [event(2, "s1", {"inbound_id": "m1", "reason": "stale_generation", "generation": 0})]
    replies = [reply(1, msgs[0], stored_at=1.2), reply(2, msgs[1], generation=0, stored_at=1.7),
               reply(3, msgs[2], generation=7, stored_at=2.5)]
    report = evaluate(record(msgs, [deletion]), facts(replies, dropped, deleted))
    assert report.post_deletion_answers == 1 and report.wrong_generation == 0
    assert report.failed_clauses() == ["3 nothing answered after deletion, generation in force"]


def test_a_message_published_after_a_deletion_answered_in_the_old_generation_fails_clause_three() -> None:
    msgs = [published(n) for n in range(2)]
    deletion = Deletion("s1", requested_at=0.5, done_at=0.6, generation=7)
    replies = [reply(1, msgs[0], generation=7), reply(2, msgs[1], generation=0)]
    report = evaluate(record(msgs, [deletion]), facts(replies))
    assert report.wrong_generation == 1


def test_a_stale_generation_drop_without_a_deletion_is_unexplained() -> None:
    msgs = [published(0)]
    dropped = [event(1, "s1", {"inbound_id": "m0", "reason": "stale_generation", "generation": 0})]
    report = evaluate(record(msgs), facts([], dropped))
    assert report.bad_drops == ["m0"] and not report.unanswered


def test_nothing_accounted_for_in_time_fails_clause_four() -> None:
    msgs = [published(0)]
    rec = record(msgs)
    rec.drained_after_s = None
    assert evaluate(rec, facts([reply(1, msgs[0])])).failed_clauses() == ["4 accounted for within the bound"]


def test_an_old_message_answered_in_the_new_generation_while_the_service_was_up_is_shown() -> None:
    msgs = [published(0)]
    deletion = Deletion("s1", requested_at=2.0, done_at=2.1, generation=7)
    report = evaluate(record(msgs, [deletion]), facts([reply(1, msgs[0], generation=7, stored_at=3.0)]))
    assert (report.refiled_after_deletion, report.refiled_while_up) == (1, 1)
    assert report.passed  # SM-22 allows it when the message was recorded after the deletion began

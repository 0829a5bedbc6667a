"""The soak's oracle: four clauses checked against what the JetStream streams hold after the run.

1. every accepted message is answered exactly once, or dropped with ``message.dropped``
   (``stale_generation`` after a deletion) or on the DLQ — nothing unanswered and undropped;
2. per session and generation, replies come in the inbound publish order of the answered messages;
3. nothing is answered after its session's deletion, and replies carry the generation in force;
4. everything is accounted for within a bound after the last fault (measured by the driver).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.soak.record import Deletion, Published, SoakRecord
from tests.soak.stored import StoredMessage

EXAMPLES = 5
# A message published this long before a deletion, with the service up all along, has been fetched and
# recorded before it (fetch timeout 0.2 s): answering it in the new generation breaks SM-22.
REFILE_MARGIN_S = 1.0


@dataclass(frozen=True)
class StreamFacts:
    """The streams' content the oracle reads (outbound replies, events by type, dead letters)."""

    replies: list[StoredMessage]
    dropped: list[StoredMessage]
    deleted: list[StoredMessage]
    dead_letters: list[StoredMessage]


def dead_letter_inbound_id(body: dict[str, Any]) -> str | None:
    """The inbound id a dead letter is about, whatever its shape (``inbound_id``, or the raw message's ``id``)."""
    for key in ("inbound_id", "message_id"):
        if isinstance(body.get(key), str):
            return str(body[key])
    raw = body.get("raw")
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        return str(raw["id"])
    return None


def unaccounted(published: list[Published], facts: StreamFacts) -> list[str]:
    """Ids of accepted messages with neither a reply, nor a ``message.dropped`` event, nor a dead letter."""
    done = {r.body.get("reply_to") for r in facts.replies}
    done |= {d.body.get("data", {}).get("inbound_id") for d in facts.dropped}
    done |= {dead_letter_inbound_id(d.body) for d in facts.dead_letters}
    return [p.msg_id for p in published if p.msg_id not in done]


@dataclass
class OracleReport:
    """Counts per clause, a few examples of each violation, and the summary table."""

    messages: int = 0
    replies: int = 0
    answered: int = 0
    dropped: int = 0  # messages with at least one drop (event or dead letter)
    dropped_by_reason: Counter[str] = field(default_factory=Counter)
    unanswered: list[str] = field(default_factory=list)
    duplicate_replies: int = 0  # replies beyond the first to one message
    duplicate_reply_ids: int = 0  # (session, turn, seq) stored more than once
    wrong_text: int = 0
    bad_drops: list[str] = field(default_factory=list)  # a drop no deletion explains
    answered_and_dropped: int = 0
    order_violations: int = 0  # replies whose message was published before one answered earlier
    order_sessions: set[str] = field(default_factory=set)
    post_deletion_answers: int = 0
    wrong_generation: int = 0
    refiled_after_deletion: int = 0  # published before a deletion, recorded and answered in the new generation
    refiled_while_up: int = 0  # … of them published ≥ REFILE_MARGIN_S before it, with no kill in between
    drained_after_s: float | None = None
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def note(self, what: str, example: str) -> None:
        if len(self.examples[what]) < EXAMPLES:
            self.examples[what].append(example)

    @property
    def clauses(self) -> dict[str, bool]:
        return {
            "1 answered exactly once or dropped": not (
                self.unanswered or self.duplicate_replies or self.duplicate_reply_ids
                or self.wrong_text or self.bad_drops
            ),
            "2 per-session order": self.order_violations == 0,
            "3 nothing answered after deletion, generation in force": not (
                self.post_deletion_answers or self.wrong_generation
            ),
            "4 accounted for within the bound": self.drained_after_s is not None,
        }

    @property
    def passed(self) -> bool:
        return all(self.clauses.values())

    def failed_clauses(self) -> list[str]:
        return [name for name, ok in self.clauses.items() if not ok]


def evaluate(record: SoakRecord, facts: StreamFacts) -> OracleReport:
    """Check the four clauses for ``record`` against ``facts``."""
    report = OracleReport(messages=len(record.published), replies=len(facts.replies))
    report.drained_after_s = record.drained_after_s
    by_id = {p.msg_id: p for p in record.published}
    deletions: dict[str, list[Deletion]] = defaultdict(list)
    for d in sorted(record.deletions, key=lambda d: d.requested_at):
        deletions[d.session_id].append(d)
    deleted_at = _deleted_event_times(facts.deleted)

    replies_of: dict[str, list[StoredMessage]] = defaultdict(list)
    for r in facts.replies:
        replies_of[str(r.body.get("reply_to"))].append(r)
    reply_ids = Counter(
        (r.body.get("session_id"), r.body.get("turn_id"), r.body.get("seq")) for r in facts.replies
    )
    report.duplicate_reply_ids = sum(n - 1 for n in reply_ids.values() if n > 1)
    drops_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in facts.dropped:
        data = ev.body.get("data", {})
        drops_of[str(data.get("inbound_id"))].append(data)
    for dl in facts.dead_letters:
        ident = dead_letter_inbound_id(dl.body)
        if ident is not None:
            drops_of[ident].append({"reason": "dlq", "inbound_id": ident})

    for p in record.published:
        replies, drops = replies_of.get(p.msg_id, []), drops_of.get(p.msg_id, [])
        gens = [0] + [d.generation for d in deletions[p.session_id]]
        done_before = sum(1 for d in deletions[p.session_id] if d.done_at < p.sent_at)
        allowed = set(gens[done_before:])
        if replies:
            report.answered += 1
        if len(replies) > 1:
            report.duplicate_replies += len(replies) - 1
            report.note("duplicate", f"{p.msg_id} ({p.session_id} #{p.index}) answered {len(replies)}×")
        for drop in drops:
            reason = str(drop.get("reason"))
            report.dropped_by_reason[reason] += 1
            gen = drop.get("generation")
            explained = reason == "dlq" or (reason == "stale_generation" and gen in gens[:-1])
            if not explained:
                report.bad_drops.append(p.msg_id)
                report.note("bad drop", f"{p.msg_id} ({p.session_id} #{p.index}) reason={reason} gen={gen}")
        if drops:
            report.dropped += 1
        if replies and drops:
            report.answered_and_dropped += 1
        if not replies and not drops:
            report.unanswered.append(p.msg_id)
            report.note("unanswered", f"{p.msg_id} ({p.session_id} #{p.index})")
        for r in replies:
            _check_reply(report, p, r, gens, allowed, deletions[p.session_id], deleted_at, record)

    report.order_violations = _order_violations(report, facts.replies, by_id)
    return report


def _deleted_event_times(events: list[StoredMessage]) -> dict[tuple[str, int], float]:
    """(session, new generation) → when its ``session.deleted`` event was stored."""
    out: dict[tuple[str, int], float] = {}
    for e in events:
        gen = e.body.get("data", {}).get("generation")
        if isinstance(gen, int):
            out.setdefault((str(e.body.get("session_id")), gen), e.stored_at)
    return out


def _check_reply(
    report: OracleReport,
    p: Published,
    r: StoredMessage,
    gens: list[int],
    allowed: set[int],
    deletions: list[Deletion],
    deleted_at: dict[tuple[str, int], float],
    record: SoakRecord,
) -> None:
    if r.body.get("text") != f"echo: {p.text}":
        report.wrong_text += 1
        report.note("wrong text", f"{p.msg_id}: {r.body.get('text')!r}")
    gen = r.body.get("generation")
    if gen not in allowed:
        report.wrong_generation += 1
        report.note("wrong generation", f"{p.msg_id} ({p.session_id} #{p.index}) gen={gen}, allowed {sorted(allowed)}")
        return
    i = gens.index(gen)
    if i < len(deletions):  # a later deletion replaced this generation
        d = deletions[i]
        fence = deleted_at.get((p.session_id, d.generation), d.done_at)
        if r.stored_at > fence:
            report.post_deletion_answers += 1
            report.note(
                "post-deletion answer",
                f"{p.msg_id} ({p.session_id} #{p.index}) gen={gen} "
                f"stored {r.stored_at - fence:+.3f}s after session.deleted",
            )
    if i > 0 and p.acked_at < deletions[i - 1].requested_at:
        report.refiled_after_deletion += 1
        requested_at = deletions[i - 1].requested_at
        down = any(k.killed_at < requested_at and k.ready_at > p.acked_at for k in record.kills)
        if not down and requested_at - p.acked_at >= REFILE_MARGIN_S:
            report.refiled_while_up += 1
            report.note(
                "new generation for an old message",
                f"{p.msg_id} ({p.session_id} #{p.index}) "
                f"published {requested_at - p.acked_at:.1f}s before the deletion",
            )


def _order_violations(report: OracleReport, replies: list[StoredMessage], by_id: dict[str, Published]) -> int:
    """Replies (first per message) per (session, generation) in stream order whose message was published earlier
    than one answered before it."""
    seen: set[str] = set()
    highest: dict[tuple[str, Any], Published] = {}
    violations = 0
    for r in sorted(replies, key=lambda r: r.seq):
        p = by_id.get(str(r.body.get("reply_to")))
        if p is None or p.msg_id in seen:
            continue
        seen.add(p.msg_id)
        key = (p.session_id, r.body.get("generation"))
        top = highest.get(key)
        if top is not None and p.inbound_seq < top.inbound_seq:
            violations += 1
            report.order_sessions.add(p.session_id)
            report.note("order", f"{p.session_id}: #{p.index} answered after #{top.index}")
        else:
            highest[key] = p
    return violations


def summary_table(record: SoakRecord, report: OracleReport) -> str:
    """The short table printed after every run (and in a failing test's message)."""
    kills = record.kills
    rows = [
        ("seed", str(record.config.seed)),
        ("config", record.config.describe()),
        ("messages accepted", str(report.messages)),
        ("replies stored", str(report.replies)),
        ("messages answered", str(report.answered)),
        ("messages dropped", str(report.dropped)),
        ("drop events by reason", _counts(report.dropped_by_reason) or "none"),
        ("unanswered and undropped", str(len(report.unanswered))),
        ("duplicate replies", f"{report.duplicate_replies} (same reply id stored twice: {report.duplicate_reply_ids})"),
        ("wrong reply text", str(report.wrong_text)),
        ("unexplained drops", str(len(report.bad_drops))),
        ("answered and also dropped", str(report.answered_and_dropped)),
        ("order violations (sessions)", f"{report.order_violations} ({len(report.order_sessions)})"),
        ("post-deletion answers", str(report.post_deletion_answers)),
        ("wrong-generation replies", str(report.wrong_generation)),
        (
            "answered in a generation newer than at publish",
            f"{report.refiled_after_deletion} ({report.refiled_while_up} published ≥{REFILE_MARGIN_S:.0f}s before "
            "the deletion with the service up)",
        ),
        ("deletions (skipped)", f"{len(record.deletions)} ({len(record.skipped_deletions)})"),
        ("kills (by trigger)", f"{len(kills)} ({_counts(Counter(k.trigger for k in kills))})"),
        ("max restart delay", f"{max((k.restart_delay_s for k in kills), default=0.0):.2f} s"),
        ("max kill to ready", f"{max((k.ready_at - k.killed_at for k in kills), default=0.0):.2f} s"),
        (
            "accounted for after last fault",
            "not within bound" if report.drained_after_s is None else f"{report.drained_after_s:.1f} s",
        ),
        ("wall time", f"{record.finished_at - record.started_at:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"  {k.ljust(width)}  {v}" for k, v in rows]
    lines += [f"  clause {name}: {'PASS' if ok else 'FAIL'}" for name, ok in report.clauses.items()]
    for what, examples in report.examples.items():
        lines += [f"  e.g. {what}: {e}" for e in examples]
    return "\n".join(["turnstile soak", *lines])


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counter.items()))

"""Prometheus metrics of one service instance (``prometheus_client``, served at ``/metrics``).

Every ``TurnstileService`` has its own ``CollectorRegistry``, so several services in one
process (tests) do not collide. The hot paths only increment counters and observe
histograms here; values that need a look around (mailbox depth, consumer pending,
ownership) are read when ``/metrics`` is scraped (``consumers/observability.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, GCCollector, Histogram, ProcessCollector

from core.errors import NotFound, TurnstileError

if TYPE_CHECKING:
    from core.engine.tools.context import ToolContext
    from core.engine.tools.registry import ToolDefinition, ToolOutcome, ToolRegistry

# Seconds: from 10 ms (a scripted turn) to minutes (a slow model with tools).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PUBLISH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
BYTES_BUCKETS = (256, 1024, 4096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304)
OWNERSHIP_STATES = ("starting", "standby", "owner", "fenced", "stopping")
UNKNOWN_TOOL = "(unknown)"  # a model may call any name: unknown names share one label


class Metrics:
    """The service's instruments. Names start with ``turnstile_``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # prometheus-client's standard process figures (``process_*``: resident memory, CPU seconds, open
        # files) and the cyclic collector's (``python_gc_*``: collections and objects collected per
        # generation), read at scrape time: memory over a long run, and whether the old generations are
        # collected (consumers/idle_gc.py), are watched from outside the process.
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        self.inbound_received = Counter(
            "turnstile_inbound_received", "inbound messages fetched from the inbound stream", registry=r
        )
        self.inbound_staged = Counter(
            "turnstile_inbound_staged", "inbound messages durably staged (first time; redeliveries not counted)",
            registry=r,
        )
        self.inbound_dead_lettered = Counter(
            "turnstile_inbound_dead_lettered", "inbound messages dead-lettered, by error code", ["code"], registry=r
        )
        self.turns = Counter("turnstile_turns", "turns ended, by outcome", ["outcome"], registry=r)
        self.turn_duration = Histogram(
            "turnstile_turn_duration_seconds", "turn.started to turn.ended", buckets=DURATION_BUCKETS, registry=r
        )
        self.reply_latency = Histogram(
            "turnstile_reply_latency_seconds", "inbound message handed to its actor to its first reply sent",
            buckets=DURATION_BUCKETS, registry=r,
        )
        self.model_tokens = Counter(
            "turnstile_model_tokens", "model tokens used, by direction (input, output)", ["direction"], registry=r
        )
        self.tool_calls = Counter(
            "turnstile_tool_calls", "tool calls, by tool and outcome (ok, error, refused)", ["tool", "outcome"],
            registry=r,
        )
        self.checkpoint_bytes = Histogram(
            "turnstile_checkpoint_bytes", "size of a published checkpoint", buckets=BYTES_BUCKETS, registry=r
        )
        self.session_opens = Counter(
            "turnstile_session_opens",
            "session engines loaded into memory, by journal: read (the journal past the last checkpoint was "
            "read), skipped (created here a moment ago, or unloaded here with its tail known)",
            ["journal"], registry=r,
        )
        self.restore_reads = Counter(
            "turnstile_restore_checkpoint_reads",
            "last-checkpoint reads of sessions being restored, by prefetched: yes (started when the message "
            "was admitted, consumers/checkpoint_prefetch.py), no (read when the restore began)",
            ["prefetched"], registry=r,
        )
        self.checkpoint_publish = Histogram(
            "turnstile_checkpoint_publish_seconds", "checkpoint sent to its ack awaited", buckets=PUBLISH_BUCKETS,
            registry=r,
        )
        self.publish_retries = Counter(
            "turnstile_publish_retries",
            "JetStream publishes sent again: their stream answered no responders (electing a leader), or a "
            "checkpoint or reply had no answer for 2-4 s",
            registry=r,
        )
        # Read at scrape time.
        self.active_actors = Gauge("turnstile_active_actors", "session actors alive", registry=r)
        self.mailbox_depth = Gauge("turnstile_mailbox_depth", "items waiting in session mailboxes", registry=r)
        self.consumer_pending = Gauge(
            "turnstile_consumer_pending", "inbound consumer: messages not yet delivered", registry=r
        )
        self.consumer_ack_pending = Gauge(
            "turnstile_consumer_ack_pending", "inbound consumer: delivered, not yet acked", registry=r
        )
        self.consumer_redelivered = Gauge(
            "turnstile_consumer_redelivered", "inbound consumer: messages delivered more than once", registry=r
        )
        self.ownership = Gauge(
            "turnstile_ownership", "1 for this process's ownership state (starting, standby, owner, fenced, stopping)",
            ["state"], registry=r,
        )
        self.set_ownership("starting")
        # Labelled children looked up once (``labels()`` takes a lock and builds a key per call).
        self._children: dict[tuple[str, str], Any] = {}

    def set_ownership(self, state: str) -> None:
        for s in OWNERSHIP_STATES:
            self.ownership.labels(s).set(1 if s == state else 0)

    def turn_ended(self, outcome: str, started_at: float | None, tokens_in: int, tokens_out: int) -> None:
        self._child(self.turns, "turns", outcome).inc()
        if started_at is not None:
            self.turn_duration.observe(time.monotonic() - started_at)
        if tokens_in:
            self._child(self.model_tokens, "tokens", "input").inc(tokens_in)
        if tokens_out:
            self._child(self.model_tokens, "tokens", "output").inc(tokens_out)

    def session_opened(self, journal_read: bool) -> None:
        self._child(self.session_opens, "opens", "read" if journal_read else "skipped").inc()

    def restore_read(self, prefetched: bool) -> None:
        self._child(self.restore_reads, "restore_reads", "yes" if prefetched else "no").inc()

    def _child(self, metric: Counter, name: str, label: str) -> Any:
        child = self._children.get((name, label))
        if child is None:
            child = self._children[(name, label)] = metric.labels(label)
        return child

    def meter_tools(self, tools: ToolRegistry) -> None:
        """Count every tool call made through ``tools`` (by tool and outcome)."""
        authorise = tools.authorise
        wrapped: dict[int, ToolDefinition] = {}
        counter = self.tool_calls

        def metered(name: str, mode: str) -> ToolDefinition:
            try:
                tool = authorise(name, mode)
            except TurnstileError as exc:
                counter.labels(UNKNOWN_TOOL if isinstance(exc, NotFound) else name, "refused").inc()
                raise
            found = wrapped.get(id(tool))
            if found is None or found.name != tool.name:
                found = wrapped[id(tool)] = replace(tool, handler=_counted(tool.name, tool.handler, counter))
            return found

        tools.authorise = metered  # type: ignore[method-assign]


def _counted(
    name: str, handler: Callable[[ToolContext, dict[str, Any]], Awaitable[ToolOutcome]], counter: Counter
) -> Callable[[ToolContext, dict[str, Any]], Awaitable[ToolOutcome]]:
    async def run(context: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            outcome = await handler(context, arguments)
        except BaseException:
            counter.labels(name, "error").inc()
            raise
        counter.labels(name, "ok" if outcome.ok else "error").inc()
        return outcome

    return run

"""Parts of the service shell switched off in a measured process: what the rules they keep cost a message.

A measurement aid, never a configuration: each part below is required by a rule, and the process it is
switched off in no longer keeps that rule. ``bench.hotpath --ablate PART[,PART]`` runs the service with
them off (``BENCH_ABLATE``, bench/profiled_service.py), so alternating runs with and without give what
each part costs a message; ``make bench``'s ``turnstile-off`` row (``python -m bench.ablation``: the
unmodified ``turnstile run`` with every part off) measures it beside turnstile in each run (issue 17's
question: which of the service shell's costs the guarantees ask for).

- ``metrics``: prometheus-client's counters, gauges, histograms and summaries do nothing (the
  operations surface, ``/metrics``);
- ``records``: a turn's start and end leave the session record alone: no record write and no
  ``session.updated`` (SM-13..16: status, last turn, tokens);
- ``marks``: a finished message is not marked ``done`` in the inbox (its row stays ``staged``: a
  restart would serve it again; MQ-1's exactly-once delivery);
- ``ks14``: the look-up of an earlier answer to the message's external event is skipped (KS-14: a
  redelivered or replayed message would be answered twice);
- ``record-events`` (a part of ``records``, not in the ``turnstile-off`` row): the records are written
  as before, only their ``session.updated`` events of a turn's start and end are not sent (SM-32):
  it tells the events' share of ``records`` from the writes'.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

PARTS = ("metrics", "records", "marks", "ks14", "record-events")
ALL = "metrics,records,marks,ks14"  # the turnstile-off row; record-events is a part of records


def ablate(parts: str) -> list[str]:
    """Switch off the comma-separated ``parts`` and say so on stderr; returns the ones switched off (ValueError on an
    unknown one, before any is switched off)."""
    chosen = [p.strip() for p in parts.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; known: {', '.join(PARTS)}")
    for part in chosen:
        _SWITCHES[part]()
    if chosen:
        print(f"ablated (rules not kept): {', '.join(chosen)}", file=sys.stderr, flush=True)
    return chosen


def _metrics() -> None:
    from prometheus_client import metrics

    def nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    metrics.Counter.inc = nothing  # type: ignore[method-assign]
    metrics.Gauge.inc = metrics.Gauge.dec = metrics.Gauge.set = nothing  # type: ignore[method-assign]
    metrics.Histogram.observe = nothing  # type: ignore[method-assign]
    metrics.Summary.observe = nothing  # type: ignore[method-assign]


def _records() -> None:
    from core.sessions.manager import SessionManager

    def none(self: Any, *args: Any, **kwargs: Any) -> asyncio.Future[None] | None:
        return None

    SessionManager.turn_started_behind = none  # type: ignore[method-assign]
    SessionManager.turn_ended_behind = none  # type: ignore[method-assign]


def _record_events() -> None:
    from consumers.manager_adapters import ManagerEvents

    emit = ManagerEvents.emit

    async def quiet(self: Any, session_id: str, event_type: str, payload: Any) -> None:
        if event_type == "session.updated" and payload.get("change") in ("turn_started", "turn_ended"):
            return None
        await emit(self, session_id, event_type, payload)

    ManagerEvents.emit = quiet  # type: ignore[method-assign]


def _marks() -> None:
    from core.store.inbox import SqlInbox

    def nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    SqlInbox.mark = nothing  # type: ignore[method-assign]


def _ks14() -> None:
    from core.engine.session_view import SessionView

    async def none(self: Any, external_event_id: str) -> None:
        return None

    SessionView.lookup_external_event = none  # type: ignore[assignment,method-assign]


_SWITCHES = {
    "metrics": _metrics, "records": _records, "marks": _marks, "ks14": _ks14, "record-events": _record_events,
}


def main() -> None:
    """``python -m bench.ablation``: ``turnstile run`` with the parts of ``BENCH_ABLATE`` (default: all) off."""
    import os

    from consumers.cli import main as cli_main

    ablate(os.environ.get("BENCH_ABLATE", ALL))
    sys.exit(cli_main(["run"]))


if __name__ == "__main__":
    main()

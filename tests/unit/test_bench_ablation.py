"""bench/ablation.py: the parts ``bench.hotpath --ablate`` switches off are off in the process that asked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from bench.ablation import PARTS, ablate

# Run in a child: switching a part off patches the service's classes for the whole process.
CHILD = textwrap.dedent(
    """
    import asyncio
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from bench.ablation import ablate
    from core.engine.session_view import SessionView
    from core.sessions.manager import SessionManager
    from core.store.inbox import SqlInbox

    registry = CollectorRegistry()
    counter = Counter("ablation_probe_total", "probe", registry=registry)
    counter.inc()
    assert registry.get_sample_value("ablation_probe_total") == 1.0
    assert ablate("records, marks,ks14,metrics") == ["records", "marks", "ks14", "metrics"]
    counter.inc(5)
    Histogram("ablation_probe_seconds", "probe", registry=registry).observe(1.0)
    assert registry.get_sample_value("ablation_probe_total") == 1.0, "metrics still counted"
    assert registry.get_sample_value("ablation_probe_seconds_count") == 0.0, "metrics still observed"
    assert SessionManager.turn_started_behind(object(), "s") is None
    assert SessionManager.turn_ended_behind(object(), "s", "replied") is None
    assert SqlInbox.mark(object(), object(), "done") is None
    assert asyncio.run(SessionView.lookup_external_event(object(), "evt")) is None
    print("ok")
    """
)


def test_each_part_is_off_in_the_process_that_switched_it_off() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_an_unknown_part_is_refused_before_anything_is_switched_off() -> None:
    with pytest.raises(ValueError, match="unknown part") as refused:
        ablate("records,everything")
    assert "everything" in str(refused.value) and all(part in str(refused.value) for part in PARTS)
    assert ablate("") == []


# ``record-events``: the records are written, only their turn bookkeeping ``session.updated`` is not sent.
CHILD_RECORD_EVENTS = textwrap.dedent(
    """
    import asyncio
    from bench.ablation import ablate
    from consumers.manager_adapters import ManagerEvents

    class Publisher:
        def __init__(self):
            self.sent = []

        async def emit_unwatched(self, session_id, event_type, payload):
            self.sent.append(payload["change"])

        async def emit(self, session_id, event_type, payload):
            self.sent.append(payload.get("change", event_type))
            return None

        async def settle(self, sent):
            return True

    assert ablate("record-events") == ["record-events"]
    publisher = Publisher()
    events = ManagerEvents(publisher)
    for change in ("turn_started", "turn_ended", "usage", "title"):
        asyncio.run(events.emit("s", "session.updated", {"change": change}))
    asyncio.run(events.emit("s", "session.deleted", {}))
    assert publisher.sent == ["usage", "title", "session.deleted"], publisher.sent
    print("ok")
    """
)


def test_record_events_silences_only_the_turn_bookkeeping_updates() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD_RECORD_EVENTS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

"""``/metrics``, ``/healthz`` and ``/readyz`` on the operator HTTP endpoint.

- ``/healthz``: 200 ``{"status": "ok", "role": …}`` while the process and its event loop run.
- ``/readyz``: 200 when the broker connection is up, the streams exist and the process
  owns the prefix (``role: owner``) or stands by for it (``role: standby``); 503 with
  ``reasons`` otherwise (starting, fenced, stopping, broker disconnected, a stream
  missing, the store refusing writes).
- ``/metrics``: Prometheus text format (``consumers/metrics.py``); values that need a
  look around (actors, mailboxes, the inbound consumer) are read at scrape time.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumers.process_view import ProcessView

log = logging.getLogger(__name__)

READY_ROLES = ("owner", "standby")


def observability_routes(service: ProcessView) -> list[web.RouteDef]:
    """The three routes, reading ``service`` at request time."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "role": service.role})

    async def readyz(_request: web.Request) -> web.Response:
        reasons = await not_ready_reasons(service)
        body: dict[str, Any] = {"ready": not reasons, "role": service.role}
        if reasons:
            body["reasons"] = reasons
        return web.json_response(body, status=503 if reasons else 200)

    async def metrics(_request: web.Request) -> web.Response:
        await refresh_gauges(service)
        body = generate_latest(service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)]


async def not_ready_reasons(service: ProcessView) -> list[str]:
    """Why the process is not ready (empty: ready)."""
    reasons: list[str] = []
    if service.role not in READY_ROLES:
        reasons.append(f"role is {service.role}")
    if not _connected(service):
        reasons.append("broker not connected")
    elif service.js is not None:
        for spec in service.subjects.streams():
            try:
                await service.js.stream_info(spec.name)
            except Exception as exc:
                reasons.append(f"stream {spec.name} unavailable ({type(exc).__name__})")
    if service.inbound is not None and service.inbound.degraded:
        reasons.append("the store refuses writes (degraded)")
    return reasons


def _connected(service: ProcessView) -> bool:
    if service.broker is None:
        return False
    try:
        return bool(service.broker.connection.is_connected)
    except Exception:  # no connection made yet
        return False


async def refresh_gauges(service: ProcessView) -> None:
    """Set the scrape-time gauges from the service's state (the consumer from the broker)."""
    m = service.metrics
    actors = service.actors
    m.active_actors.set(len(actors) if actors is not None else 0)
    m.mailbox_depth.set(actors.queued() if actors is not None else 0)
    if service.js is None or service.role != "owner":
        return
    try:
        info = await service.js.consumer_info(service.subjects.inbound_stream, service.settings.consumer_name)
    except Exception as exc:
        log.debug("metrics: reading the inbound consumer failed: %r", exc)
        return
    m.consumer_pending.set(info.num_pending or 0)
    m.consumer_ack_pending.set(info.num_ack_pending or 0)
    m.consumer_redelivered.set(info.num_redelivered or 0)

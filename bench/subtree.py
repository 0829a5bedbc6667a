"""Control API calls the bench makes: build a session subtree, delete it (``<prefix>.api.session.*``)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson
from nats.aio.client import Client

from schemas.control import ControlRequest, SessionCreateRequest, SessionIdRequest
from schemas.subjects import Subjects

CREATE_CONCURRENCY = 16  # requests in flight while building: keeps the service's API queue fed


class ControlRefused(RuntimeError):
    """Raised when a control request is answered with ``{ok: false, error: {code, message}}``."""


async def control(nc: Client, subjects: Subjects, verb: str, request: ControlRequest, timeout_s: float) -> dict[str, Any]:
    """One ``session.<verb>`` request/reply; the ``result`` object, or ControlRefused."""
    body = request.model_dump_json(exclude_unset=True).encode()
    reply = await nc.request(subjects.api("session", verb), body, timeout=timeout_s)
    data: dict[str, Any] = orjson.loads(reply.data)
    if not data.get("ok"):
        err = data.get("error") or {}
        raise ControlRefused(f"session.{verb}: {err.get('code')}: {err.get('message')}")
    result: dict[str, Any] = data["result"]
    return result


async def build_subtree(nc: Client, subjects: Subjects, root: str, children: list[str], timeout_s: float) -> int:
    """Create ``root`` and ``children`` under it (session.create with ``fields.parent_id``).

    Returns how many children the root lists afterwards (session.get).
    """
    root_request = SessionCreateRequest.model_validate({"fields": {"id": root}})
    await control(nc, subjects, "create", root_request, timeout_s)
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(child: str) -> None:
        async with gate:
            request = SessionCreateRequest.model_validate({"fields": {"id": child, "parent_id": root}})
            await control(nc, subjects, "create", request, timeout_s)

    await asyncio.gather(*(one(c) for c in children))
    record = await control(nc, subjects, "get", SessionIdRequest.model_validate({"session_id": root}), timeout_s)
    return len(record.get("children") or [])


@dataclass
class DeletionOutcome:
    """One session.delete as the client saw it (perf_counter times)."""

    started_at: float
    ended_at: float | None = None
    deleted: int = 0
    error: str | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at


async def delete_session(nc: Client, subjects: Subjects, session_id: str, timeout_s: float, outcome: DeletionOutcome) -> None:
    """session.delete of ``session_id``, filling ``outcome`` (end time also on failure; never raises)."""
    try:
        result = await control(nc, subjects, "delete", SessionIdRequest.model_validate({"session_id": session_id}), timeout_s)
        outcome.deleted = len(result.get("deleted") or [])
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        outcome.ended_at = time.perf_counter()

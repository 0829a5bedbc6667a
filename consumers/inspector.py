"""The session inspector: a read-only web page and its JSON endpoints on the operator HTTP endpoint.

``GET /inspector/`` serves the page (plain HTML/JS/CSS from ``consumers/inspector_static``,
no build step); the page reads:

- ``/inspector/api/sessions?q=`` the session tree (records with label, kind, status), or the
  sessions whose id contains ``q`` (case-insensitive) with their ancestors;
- ``/inspector/api/session?id=`` one record and its transcript, from its last checkpoint;
- ``/inspector/api/checkpoints?id=`` the checkpoints the stream keeps for it (the timeline);
- ``/inspector/api/checkpoint?id=&seq=`` one of them, whole;
- ``/inspector/api/live?id=`` live events and checkpoints (``consumers/inspector_live.py``).

Session ids travel as a query parameter (they may hold ``/`` and any other character).
Nothing here changes anything; errors are ``{code, message}`` with a matching HTTP status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from nats.js.errors import NotFoundError

from consumers.inspector_live import live_handler
from consumers.inspector_replies import answering, error_response, required_session_id
from consumers.process_view import ProcessView
from consumers.rendering import rendering
from consumers.replay import replay
from consumers.settings import service_time_zone
from core.errors import InvalidInput, NotFound, Unavailable
from core.sessions.records import SessionRecord

STATIC_DIR = Path(__file__).with_name("inspector_static")
STATIC_FILES = {
    "app.js": "application/javascript",
    "style.css": "text/css",
}
MAX_SESSIONS = 500  # rows one listing returns; search narrows it
MAX_TREE_DEPTH = 1000  # guards the ancestor walk against a malformed parent chain


def inspector_routes(service: ProcessView) -> list[web.RouteDef]:
    """The inspector's routes, bound to the running service (register before the endpoint starts)."""
    api = InspectorApi(service)
    return [
        web.get("/inspector", _redirect_to_page),
        web.get("/inspector/", _page),
        web.get("/inspector/static/{name}", _static),
        web.get("/inspector/api/sessions", answering(api.sessions)),
        web.get("/inspector/api/session", answering(api.session)),
        web.get("/inspector/api/checkpoints", answering(api.checkpoints)),
        web.get("/inspector/api/checkpoint", answering(api.checkpoint)),
        web.get("/inspector/api/live", live_handler(service)),
    ]


async def _redirect_to_page(_request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/inspector/")


async def _page(_request: web.Request) -> web.StreamResponse:
    return _file_response(STATIC_DIR / "index.html", "text/html")


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    content_type = STATIC_FILES.get(name)  # only the files we ship: no path ever reaches the disk
    if content_type is None:
        return error_response(NotFound(f"no inspector asset {name!r}"))
    return _file_response(STATIC_DIR / name, content_type)


def _file_response(path: Path, content_type: str) -> web.Response:
    return web.Response(
        body=path.read_bytes(), content_type=content_type, charset="utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


class InspectorApi:
    """The JSON endpoints: reads of the session manager and the checkpoint stream, nothing else."""

    def __init__(self, service: ProcessView) -> None:
        self._service = service
        self._tz = service_time_zone(service.settings.time_zone)

    def _manager(self) -> Any:
        if self._service.manager is None or self._service.js is None:
            raise Unavailable("the service is not serving yet (starting, or standing by for the ownership lease)")
        return self._service.manager

    def _record(self, record: SessionRecord) -> dict[str, Any]:
        out: dict[str, Any] = rendering(self._tz, self._manager()).session(record).model_dump(mode="json")
        return out

    async def sessions(self, request: web.Request) -> dict[str, Any]:
        records: list[SessionRecord] = self._manager().list_sessions()
        query = request.query.get("q", "").strip().lower()
        if query:
            records = _with_ancestors([r for r in records if query in r.id.lower()], self._manager())
        shown = records[:MAX_SESSIONS]
        return {"sessions": [self._record(r) for r in shown], "truncated": len(records) > len(shown)}

    async def session(self, request: web.Request) -> dict[str, Any]:
        sid = required_session_id(request)
        record = self._manager().get_session(sid)
        last = await self._last_checkpoint(sid)
        if record is None and last is None:
            raise NotFound(f"no session {sid!r}")
        body: dict[str, Any] = {"session": self._record(record) if record else None, "transcript": [],
                                "checkpoint": None}
        if last is not None:
            seq, payload = last
            checkpoint = orjson.loads(payload)
            snapshot = checkpoint.get("snapshot") or {}
            body["transcript"] = snapshot.get("transcript", [])
            body["checkpoint"] = _summary(seq, checkpoint, len(payload)) | {"status": snapshot.get("status")}
        return body

    async def _last_checkpoint(self, sid: str) -> tuple[int, bytes] | None:
        self._manager()
        publisher = self._service.publisher
        if publisher is None:
            raise Unavailable("the service is not serving yet")
        return await publisher.last_checkpoint(sid)

    async def checkpoints(self, request: web.Request) -> dict[str, Any]:
        sid = required_session_id(request)
        self._manager()
        js, subjects = self._service.js, self._service.subjects
        assert js is not None
        timeline = [
            _summary(c.seq, c.data, len(orjson.dumps(c.data)))
            async for c in replay(js, subjects, sid, "checkpoints")
        ]
        return {"checkpoints": timeline, "kept_per_session": self._service.settings.checkpoints_per_session}

    async def checkpoint(self, request: web.Request) -> dict[str, Any]:
        sid = required_session_id(request)
        raw_seq = request.query.get("seq", "")
        if not raw_seq.isdigit() or int(raw_seq) < 1:
            raise InvalidInput("give the checkpoint's stream sequence as ?seq= (a positive integer)")
        self._manager()
        js, subjects = self._service.js, self._service.subjects
        assert js is not None
        try:
            msg = await js.get_msg(subjects.checkpoint_stream, int(raw_seq))
        except NotFoundError as exc:
            raise NotFound(f"no checkpoint at sequence {raw_seq} (never written, or no longer kept)") from exc
        if msg.subject != subjects.checkpoint(sid):
            raise NotFound(f"the checkpoint at sequence {raw_seq} is not one of session {sid!r}")
        data: dict[str, Any] = orjson.loads(msg.data or b"{}")
        return data


def _summary(seq: int, checkpoint: dict[str, Any], size_bytes: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "transition": checkpoint.get("transition"),
        "state_version": checkpoint.get("state_version"),
        "generation": checkpoint.get("generation"),
        "size_bytes": size_bytes,
        "at": checkpoint.get("at"),
    }


def _with_ancestors(matches: list[SessionRecord], manager: Any) -> list[SessionRecord]:
    """The matches and every ancestor of them, in tree order (ancestors first)."""
    wanted: dict[str, SessionRecord] = {}
    for record in matches:
        chain: list[SessionRecord] = []
        current: SessionRecord | None = record
        while current is not None and current.id not in wanted and len(chain) < MAX_TREE_DEPTH:
            chain.append(current)
            current = manager.get_session(current.parent_id) if current.parent_id else None
        for r in reversed(chain):
            wanted[r.id] = r
    return list(wanted.values())

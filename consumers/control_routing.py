"""Control API across partitioned workers: a request about a session is answered by its partition's owner.

Every worker serves ``<prefix>.api.>`` (queue group ``turnstile-api``), so any one of them gets a
request. With ``TURNSTILE_PARTITIONS`` > 1:

- an operation naming a session (``session_id``, or the id a ``session.create`` /
  ``session.create_child`` will file) runs in the process that owns the session's partition:
  the receiving worker runs it itself when that is it, else forwards the request on
  ``<prefix>.relay.<member>`` to the owner named by the partition lease and returns the owner's
  reply unchanged (same result, same error codes, the events published by the owner);
- every other operation (lists, places, workspaces, platforms) is answered by the receiving
  worker from its records, which the store's change feed keeps current (consumers/shared_state.py);
- deleting a subtree whose sessions other workers own (SM-21 across processes): before the
  deletion is written, each owner stops the session's running turn and holds its actor
  (``hold``); after ``session.deleted``, the owner reads the records again (the new generation)
  and clears the session's history and checkpoints (``clear``), which ends the hold. A message
  staged meanwhile carries the old generation and is dropped, so nothing of the deleted session
  is answered after its deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import BaseModel

from consumers.actors import ActorRegistry
from consumers.api import Operation, error_reply, ok_reply
from consumers.partitioned import PartitionedInbound
from core.errors import TurnstileError, Unavailable
from core.sessions.manager import SessionManager
from schemas.subjects import Subjects
from schemas.wire import Page

log = logging.getLogger(__name__)

RELAY_TIMEOUT_S = 30.0
HOLD_MAX_S = 30.0  # a hold whose ``clear`` never comes (the deleting worker died) ends by itself


class RelayedError(TurnstileError):
    """Raised when the owner of a session answered a forwarded request with an error (its code kept)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def routing_key(op: Operation, request: BaseModel) -> str | None:
    """The session whose owner must run ``request`` (None: any worker answers)."""
    session_id = getattr(request, "session_id", None)
    if isinstance(session_id, str):
        return session_id
    if op.name in ("session.create", "session.create_child"):
        fields = getattr(request, "fields", None)
        if fields is not None and getattr(fields, "id", None):
            return str(fields.id)
    return None


class ControlRouter:
    """Wraps the control operations so each runs where its session is owned; serves relayed requests."""

    def __init__(
        self,
        partitioned: PartitionedInbound,
        *,
        subjects: Subjects,
        connection: Client,
        manager: SessionManager,
        actors: ActorRegistry,
        clear_history: Callable[[str], Awaitable[bool]],
    ) -> None:
        self._partitioned_inbound = partitioned
        self._subjects = subjects
        self._connection = connection
        self._manager = manager
        self._actors = actors
        self._clear_history = clear_history
        self._ops: dict[str, Operation] = {}
        self._holds: dict[str, asyncio.Event] = {}
        self._hold_tasks: set[asyncio.Task[None]] = set()
        self._remote_clears: dict[str, str] = {}  # session → member holding it for a deletion run here
        self._sub: Subscription | None = None

    @property
    def _partitioned(self) -> PartitionedInbound | None:
        return self._partitioned_inbound

    def wrap(self, operations: list[Operation]) -> list[Operation]:
        wrapped = []
        for op in operations:
            self._ops[op.name] = op
            wrapped.append(replace(op, call=self._routed(op), result=op.result))
        return wrapped

    def _routed(self, op: Operation) -> Callable[[Any], Awaitable[Any]]:
        async def call(request: BaseModel) -> Any:
            partitioned = self._partitioned
            if partitioned is None:
                return await op.call(request)
            if op.name in ("session.create", "session.create_child"):
                _give_id(request)
            key = routing_key(op, request)
            if key is None:  # the store's change feed keeps this worker's records current
                return await op.call(request)
            if partitioned.owns_session(key):
                return await self._run_here(op, request)
            return await self._forward(partitioned, key, op, request)

        return call

    async def _run_here(self, op: Operation, request: BaseModel) -> Any:
        if op.name == "session.delete":
            await self._manager.reload()  # the whole subtree, children other workers filed included
            return await self._delete_here(op, request)
        return await op.call(request)

    async def _forward(self, partitioned: PartitionedInbound, key: str, op: Operation, request: BaseModel) -> Any:
        owner = await partitioned.ownership.owner_of(partitioned.partition_of(key))
        if owner is None:
            raise Unavailable(f"session {key!r} is moving to another worker; retry in a moment")
        body = orjson.dumps({"kind": "op", "op": op.name, "request": request.model_dump(mode="json")})
        raw = await self._request(_member_of(owner), body)
        reply = orjson.loads(raw)
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise RelayedError(str(error.get("code", "internal")), str(error.get("message", "")))
        if "next_cursor" in reply:
            return Page(reply["result"], reply["next_cursor"])
        return reply["result"]

    async def _request(self, member: str, body: bytes) -> bytes:
        try:
            msg = await self._connection.request(self._subjects.relay(member), body, timeout=RELAY_TIMEOUT_S)
        except Exception as exc:
            raise Unavailable(f"the owning worker did not answer ({type(exc).__name__}); retry") from None
        return bytes(msg.data)

    # -- deletion across owners ---------------------------------------------------------

    async def _delete_here(self, op: Operation, request: BaseModel) -> Any:
        partitioned = self._partitioned
        assert partitioned is not None
        manager = self._manager
        root = routing_key(op, request)  # session.delete names its session
        assert root is not None
        subtree = manager.subtree(root)
        remote = [sid for sid in subtree if not partitioned.owns_session(sid)]
        held: list[tuple[str, str]] = []
        try:
            for sid in remote:  # every running turn of the subtree stops before anything is deleted
                owner = await partitioned.ownership.owner_of(partitioned.partition_of(sid))
                if owner is not None:
                    await self._request(_member_of(owner), orjson.dumps({"kind": "hold", "session_id": sid}))
                    held.append((sid, _member_of(owner)))
                    self._remote_clears[sid] = _member_of(owner)
            return await op.call(request)
        finally:
            for sid, member in held:  # normally ended by ``clear``; a failed deletion must not hold for ever
                if self._remote_clears.pop(sid, None) is not None:
                    await _quietly(self._request(member, orjson.dumps({"kind": "release", "session_id": sid})))

    async def clear_elsewhere(self, session_id: str) -> bool | None:
        """The clear of a deleted session another worker owns (None: it is ours, clear it here)."""
        member = self._remote_clears.pop(session_id, None)
        if member is None:
            partitioned = self._partitioned
            if partitioned is None or partitioned.owns_session(session_id):
                return None
            owner = await partitioned.ownership.owner_of(partitioned.partition_of(session_id))
            if owner is None:
                return None  # nobody runs it now: clearing from here is safe
            member = _member_of(owner)
        raw = await self._request(member, orjson.dumps({"kind": "clear", "session_id": session_id}))
        return bool(orjson.loads(raw).get("ok"))

    # -- the owner's side -----------------------------------------------------------------

    async def serve(self) -> None:
        partitioned = self._partitioned_inbound
        self._sub = await self._connection.subscribe(
            self._subjects.relay(partitioned.ownership.member), cb=self._on_relay
        )

    async def close(self) -> None:
        if self._sub is not None:
            await _quietly(self._sub.unsubscribe())
            self._sub = None
        for gate in self._holds.values():
            gate.set()

    async def _on_relay(self, msg: Msg) -> None:
        try:
            body = orjson.loads(msg.data)
            kind = body.get("kind")
            if kind == "op":
                reply = await self._relayed_op(str(body["op"]), body.get("request") or {})
            elif kind == "hold":
                reply = await self._hold(str(body["session_id"]))
            elif kind == "clear":
                reply = await self._clear(str(body["session_id"]))
            elif kind == "release":
                gate = self._holds.pop(str(body["session_id"]), None)
                if gate is not None:
                    gate.set()
                reply = ok_reply(True)
            else:
                reply = error_reply("invalid", f"unknown relay kind {kind!r}")
        except Exception as exc:
            log.exception("relayed control request failed")
            reply = error_reply("internal", f"{type(exc).__name__}: {exc}")
        if msg.reply:
            await _quietly(msg.respond(reply))

    async def _relayed_op(self, name: str, request: dict[str, Any]) -> bytes:
        op = self._ops.get(name)
        if op is None:
            return error_reply("not_found", f"no control operation {name!r}")
        parsed = op.request.model_validate(request)
        key = routing_key(op, parsed)
        partitioned = self._partitioned
        if key is not None and partitioned is not None and not partitioned.owns_session(key):
            return error_reply("unavailable", f"session {key!r} moved to another worker; retry")
        try:
            return ok_reply(await self._run_here(op, parsed))
        except TurnstileError as exc:
            return error_reply(exc.code, exc.message)
        except Exception as exc:
            log.exception("relayed control %s failed", name)
            return error_reply("internal", f"{type(exc).__name__}: {exc}")

    async def _hold(self, session_id: str) -> bytes:
        actors = self._actors
        entered = asyncio.Event()
        gate = asyncio.Event()
        self._holds[session_id] = gate

        async def holding() -> None:
            async with actors.stopped(session_id):
                entered.set()
                try:
                    await asyncio.wait_for(gate.wait(), HOLD_MAX_S)
                except TimeoutError:
                    log.warning("session %s: deletion hold ended without its clear", session_id)

        task = asyncio.create_task(holding(), name=f"deletion-hold:{session_id}")
        self._hold_tasks.add(task)
        task.add_done_callback(self._hold_tasks.discard)
        await entered.wait()
        log.info("session %s: stopped and held for its deletion by another worker", session_id)
        return ok_reply(True)

    async def _clear(self, session_id: str) -> bytes:
        await self._manager.reload()  # the deletion's new generation: what is staged of the old one is dropped
        gate = self._holds.pop(session_id, None)
        try:
            ok = await self._clear_history(session_id)
        finally:
            if gate is not None:
                gate.set()
        log.info("session %s: deleted by another worker; history and checkpoints cleared here (%s)", session_id, ok)
        return ok_reply(ok) if ok else error_reply("internal", f"clearing {session_id!r} failed")


def _give_id(request: BaseModel) -> None:
    """A session created through the API gets its id here, so it is filed by its partition's owner."""
    fields = getattr(request, "fields", None)
    if fields is not None and hasattr(fields, "id") and not getattr(fields, "id", None):
        with contextlib.suppress(Exception):  # a frozen model: the creating worker picks the id
            fields.id = uuid.uuid4().hex


def _member_of(owner_id: str) -> str:
    return owner_id.rsplit(":", 1)[-1]


async def _quietly(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception as exc:
        log.debug("control routing bookkeeping failed: %r", exc)

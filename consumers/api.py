"""Control API: NATS request/reply on ``<prefix>.api.<resource>.<verb>`` through a FastStream router.

Every handler decodes and validates its request with a pydantic model, calls
the core, and answers ``{ok: true, result}`` or ``{ok: false, error: {code,
message}}``. A refusal is never a stack trace; an unexpected failure is
logged and answered with code ``internal``. A request larger than
``TURNSTILE_MAX_REQUEST_BYTES`` is refused ``too_large`` before it is decoded;
a list operation answers a ``Page``: ``{ok: true, result: [...], next_cursor}``.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from faststream.nats import NatsRouter
from faststream.nats.annotations import NatsMessage
from pydantic import BaseModel, ValidationError

from core.errors import TurnstileError
from schemas.subjects import Subjects
from schemas.wire import Page

log = logging.getLogger(__name__)

API_QUEUE = "turnstile-api"
# Its own queue group: NATS hands a request to one member per group, so in the
# operations' group the fallback would compete with them for known verbs.
API_FALLBACK_QUEUE = "turnstile-api-fallback"

Handler = Callable[[Any], Awaitable[Any]]


@dataclass(frozen=True)
class Operation:
    """One control operation: its resource, verb, request model, implementation and result model.

    ``result`` is the type of the reply's ``result`` (a model, or ``list[Model]``); when not
    given it is read from ``call``'s return annotation. Every operation must end up with one
    (tests/unit/contract/test_operation_results.py checks it; the AsyncAPI document and the CLI use it).
    """

    resource: str
    verb: str
    request: type[BaseModel]
    call: Handler
    summary: str = ""
    result: Any = None

    def __post_init__(self) -> None:
        if self.result is None:
            object.__setattr__(self, "result", _return_type(self.call))

    @property
    def name(self) -> str:
        """``resource.verb``."""
        return f"{self.resource}.{self.verb}"


def _return_type(call: Handler) -> Any:
    """The return annotation of ``call`` (``None`` when it has none or names ``Any``)."""
    try:
        hint = typing.get_type_hints(call).get("return")
    except (NameError, TypeError):
        return None
    return None if hint is Any else hint


def error_reply(code: str, message: str) -> bytes:
    return orjson.dumps({"ok": False, "error": {"code": code, "message": message}})


def ok_reply(result: Any) -> bytes:
    if isinstance(result, Page):
        return orjson.dumps({"ok": True, "result": result.items, "next_cursor": result.next_cursor}, default=_default)
    return orjson.dumps({"ok": True, "result": result}, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"cannot encode {type(value).__name__}")


async def dispatch(op: Operation, raw: bytes, max_request_bytes: int | None = None) -> bytes:
    """Validate ``raw`` against the operation's request model and run it."""
    if max_request_bytes is not None and len(raw) > max_request_bytes:
        return error_reply(
            "too_large", f"request is {len(raw)} bytes; at most {max_request_bytes} (TURNSTILE_MAX_REQUEST_BYTES)"
        )
    try:
        data = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        return error_reply("bad_json", f"request is not JSON: {exc}")
    try:
        request = op.request.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:5]
        )
        return error_reply("invalid", details)
    try:
        result = await op.call(request)
    except TurnstileError as exc:
        return error_reply(exc.code, exc.message)
    except Exception as exc:
        log.exception("control %s.%s failed", op.resource, op.verb)
        return error_reply("internal", f"{type(exc).__name__}: {exc}")
    return ok_reply(result)


def build_router(
    subjects: Subjects, operations: list[Operation], max_request_bytes: int | None = None
) -> NatsRouter:
    """One FastStream subscriber (queue group ``turnstile-api``) per operation, plus a
    fallback on ``<prefix>.api.>`` that answers ``not_found`` for what none of them serves."""
    router = NatsRouter()
    for op in operations:
        router.subscriber(subjects.api(op.resource, op.verb), queue=API_QUEUE)(_handler_for(op, max_request_bytes))
    known = frozenset(subjects.api(op.resource, op.verb) for op in operations)
    router.subscriber(subjects.api_all, queue=API_FALLBACK_QUEUE, no_reply=True)(
        _fallback_for(subjects.api_all.removesuffix(">"), known)
    )
    return router


def unknown_operation_reply(api_head: str, subject: str) -> bytes:
    """The answer to a request no operation serves: ``not_found`` naming what was asked."""
    return error_reply("not_found", f"no control operation {subject.removeprefix(api_head)!r}")


def _fallback_for(api_head: str, known: frozenset[str]) -> Callable[[NatsMessage], Awaitable[None]]:
    async def api_unknown(message: NatsMessage) -> None:
        subject = message.raw_message.subject
        if subject in known or not message.reply_to:
            return  # its own handler answers; a bare publish wants no answer
        await message.raw_message.respond(unknown_operation_reply(api_head, subject))

    return api_unknown


def _handler_for(op: Operation, max_request_bytes: int | None) -> Callable[[NatsMessage], Awaitable[bytes]]:
    async def handle(message: NatsMessage) -> bytes:
        return await dispatch(op, bytes(message.body), max_request_bytes)

    handle.__name__ = f"api_{op.resource}_{op.verb}"
    return handle

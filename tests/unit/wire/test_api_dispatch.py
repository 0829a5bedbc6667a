"""Control API dispatch: validation and refusals are {ok: false, error: {code, message}}."""

from __future__ import annotations

import orjson
from pydantic import BaseModel

from consumers.api import Operation, dispatch
from core.errors import Conflict


class Req(BaseModel):
    name: str


async def echo(req: Req) -> dict[str, str]:
    return {"hello": req.name}


async def refuse(req: Req) -> None:
    raise Conflict(f"{req.name} is busy")


async def explode(req: Req) -> None:
    raise RuntimeError("boom")


async def test_a_valid_request_gets_its_result() -> None:
    reply = orjson.loads(await dispatch(Operation("x", "echo", Req, echo), b'{"name":"a"}'))
    assert reply == {"ok": True, "result": {"hello": "a"}}


async def test_bad_json_and_bad_fields_are_refused_clearly() -> None:
    op = Operation("x", "echo", Req, echo)
    assert orjson.loads(await dispatch(op, b"{"))["error"]["code"] == "bad_json"
    err = orjson.loads(await dispatch(op, b'{"name": 3}'))["error"]
    assert err["code"] == "invalid" and "name" in err["message"]


async def test_a_domain_refusal_keeps_its_code() -> None:
    reply = orjson.loads(await dispatch(Operation("x", "r", Req, refuse), b'{"name":"a"}'))
    assert reply == {"ok": False, "error": {"code": "conflict", "message": "a is busy"}}


async def test_an_unexpected_failure_is_internal_not_a_stack_trace() -> None:
    reply = orjson.loads(await dispatch(Operation("x", "e", Req, explode), b'{"name":"a"}'))
    assert reply["ok"] is False and reply["error"]["code"] == "internal"
    assert "Traceback" not in reply["error"]["message"]

"""Control replies stay under the server's max payload (lists are paged) and oversized requests are refused."""

from __future__ import annotations

from typing import Any

import orjson
from nats.aio.client import Client

from consumers.service import TurnstileService
from schemas.subjects import Subjects


async def call(nc: Client, subjects: Subjects, operation: str, body: dict[str, Any] | bytes) -> dict[str, Any]:
    resource, verb = operation.split(".")
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    reply = await nc.request(subjects.api(resource, verb), raw, timeout=20)
    assert len(reply.data) <= nc.max_payload
    answer: dict[str, Any] = orjson.loads(reply.data)
    return answer


async def all_pages(nc: Client, subjects: Subjects, operation: str, body: dict[str, Any]) -> tuple[list[str], int]:
    ids: list[str] = []
    pages = 0
    cursor = None
    while True:
        answer = await call(nc, subjects, operation, {**body, **({"cursor": cursor} if cursor else {})})
        assert answer["ok"], answer
        pages += 1
        ids += [item["id"] for item in answer["result"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            return ids, pages


async def test_session_list_pages_by_limit_and_cursor_and_the_old_call_still_answers(
    nc: Client, subjects: Subjects, service: TurnstileService
) -> None:
    made = [(await call(nc, subjects, "session.create", {}))["result"]["id"] for _ in range(7)]
    first = await call(nc, subjects, "session.list", {"limit": 3})
    assert len(first["result"]) == 3 and first["next_cursor"]
    ids, pages = await all_pages(nc, subjects, "session.list", {"limit": 3})
    assert sorted(ids) == sorted(made) and len(ids) == len(set(ids)) and pages == 3
    old = await call(nc, subjects, "session.list", {})
    assert sorted(r["id"] for r in old["result"]) == sorted(made) and old["next_cursor"] is None
    bad = await call(nc, subjects, "session.list", {"cursor": "not-a-cursor"})
    assert bad["error"]["code"] == "invalid"
    too_many = await call(nc, subjects, "session.list", {"limit": 100_000})
    assert too_many["error"]["code"] == "invalid"


async def test_a_list_larger_than_the_max_payload_is_cut_into_pages_that_fit(
    nc: Client, subjects: Subjects, service: TurnstileService
) -> None:
    blob = "x" * 20_000
    made = [
        (await call(nc, subjects, "session.create", {"fields": {"metadata": {"blob": blob}}}))["result"]["id"]
        for _ in range(60)
    ]  # ~1.2 MB of records: more than the server's 1 MB max payload in one reply
    ids, pages = await all_pages(nc, subjects, "session.list", {})
    assert sorted(ids) == sorted(made) and pages >= 2
    parent = made[0]
    for _ in range(3):
        await call(nc, subjects, "session.create_child", {"parent_id": parent, "fields": {"metadata": {"b": blob}}})
    children, _ = await all_pages(nc, subjects, "session.children", {"session_id": parent, "limit": 2})
    assert len(children) == 3


async def test_an_oversized_control_request_is_refused_as_too_large_before_decoding(
    nc: Client, subjects: Subjects, service: TurnstileService
) -> None:
    limit = service.settings.max_request_bytes
    body = b'{"session_id": "' + b"a" * limit + b'"}'
    answer = await call(nc, subjects, "session.get", body)
    assert answer["error"]["code"] == "too_large"
    assert str(limit) in answer["error"]["message"]
    unknown = await call(nc, subjects, "nothing.here", body)
    assert unknown["error"]["code"] == "not_found"

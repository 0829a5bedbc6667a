"""Paged list replies: at most ``limit`` items and at most a byte budget, continued with an opaque cursor.

A list operation returns a ``Page``; the reply carries its items as ``result`` and ``next_cursor``
beside it (``null`` on the last page), so a reply never exceeds the server's max payload however
many records there are. Items are ordered by a key (e.g. ``(created_at, id)``); the cursor encodes
the last key returned, so records created or deleted between pages neither repeat nor shift the rest.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from core.errors import InvalidInput
from schemas.wire import Page

T = TypeVar("T")
SortKey = tuple[Any, ...]

REPLY_ENVELOPE_BYTES = 4_096
"""Room kept for the reply's envelope (``{"ok": true, "result": [...], "next_cursor": ...}``)."""




def encode_cursor(key: SortKey) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def decode_cursor(cursor: str) -> SortKey:
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        decoded = None
    if not isinstance(decoded, list):
        raise InvalidInput("cursor: not a cursor this service issued (pass next_cursor back unchanged)")
    return tuple(decoded)


def encoded_size(item: Any) -> int:
    """Bytes ``item`` takes in a reply."""
    value = item.model_dump(mode="json") if isinstance(item, BaseModel) else item
    return len(orjson.dumps(value)) + 1


def paginate(
    items: Iterable[T],
    key: Callable[[T], SortKey],
    render: Callable[[T], Any],
    *,
    limit: int,
    cursor: str | None,
    budget_bytes: int,
) -> Page[Any]:
    """The page after ``cursor``: up to ``limit`` rendered items whose encoding fits in ``budget_bytes``.

    The first item of a page is always included (a single record larger than the budget is the
    caller's problem, as for a ``get``); the page ends before the item that would overflow.
    """
    after = decode_cursor(cursor) if cursor else None
    ordered = sorted(items, key=key)
    if after is not None:
        try:
            ordered = [item for item in ordered if key(item) > after]
        except TypeError as exc:  # a cursor of another list: its key does not compare
            raise InvalidInput("cursor: not a cursor of this list") from exc
    page: list[Any] = []
    used = 0
    last: T | None = None
    for item in ordered:
        if len(page) == limit:
            break
        rendered = render(item)
        size = encoded_size(rendered)
        if page and used + size > budget_bytes:
            break
        page.append(rendered)
        used += size
        last = item
    more = last is not None and len(page) < len(ordered)
    return Page(page, encode_cursor(key(last)) if more and last is not None else None)


def reply_budget(max_payload: int) -> int:
    """Bytes of items a reply may carry under the server's ``max_payload``."""
    return max(max_payload - REPLY_ENVELOPE_BYTES, REPLY_ENVELOPE_BYTES)

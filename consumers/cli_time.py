"""``--since``: an ISO 8601 date or time (a naive one is UTC) or a span back from now (``90s``, ``15m``, ``2h``, ``1d``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*(?:ago)?\s*$", re.IGNORECASE)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """The instant ``value`` names, timezone-aware; ``ValueError`` with a one-line reason otherwise."""
    span = _SPAN.match(value)
    if span:
        amount, unit = float(span.group(1)), span.group(2).lower()
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
    text = value.strip()
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time: give ISO 8601 (2026-11-30, 2026-11-30T10:00, 2026-11-30T10:00:00+01:00; "
            "without an offset it is UTC) or a span back from now (90s, 15m, 2h, 1d)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)

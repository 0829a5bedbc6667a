"""Time as text: the RFC 3339 check used by wakeup markers."""

from __future__ import annotations

import re
from datetime import datetime

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def is_rfc3339(value: object) -> bool:
    """True for a complete RFC 3339 date-time with an offset."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return False
    try:
        datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return False
    return True

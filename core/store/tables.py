"""Import every table module so the shared metadata holds the whole schema."""

from __future__ import annotations

import core.store.inbox  # noqa: F401

"""Import every table module so the shared metadata holds the whole schema."""

from __future__ import annotations

import core.store.inbox  # noqa: F401
import core.store.journal_tables  # noqa: F401
import core.store.lease_repo  # noqa: F401
import core.store.platform_repo  # noqa: F401
import core.store.session_tables  # noqa: F401

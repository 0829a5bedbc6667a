"""Import every table module so the shared metadata holds the whole schema."""

from __future__ import annotations

import core.store.chat_scope_repo
import core.store.inbox
import core.store.journal_tables
import core.store.lease_repo
import core.store.partition_epochs
import core.store.platform_repo
import core.store.session_tables  # noqa: F401

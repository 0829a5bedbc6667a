"""KS-19 file leases in SQL: held across store instances (processes), exclusive, released per holder."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.lease_repo  # noqa: F401 - registers the table
from core.errors import Conflict
from core.store.lease_repo import SqlFileLeases


@pytest.mark.rule("KS-19")
async def test_a_lease_outlives_its_store_object_and_only_its_holder_releases_it(engine: AsyncEngine) -> None:
    first = SqlFileLeases(engine)
    await first.acquire("writer-a", "/p/a.txt")
    await first.acquire("writer-a", "/p/a.txt")  # again: fine
    await first.acquire("writer-a", "/p/b.txt")
    # Another process (a second store object on the same database) sees the leases.
    second = SqlFileLeases(engine)
    with pytest.raises(Conflict):
        await second.acquire("writer-b", "/p/a.txt")
    assert await second.held_by("writer-a") == ["/p/a.txt", "/p/b.txt"]
    assert await second.release_all("writer-b") == 0
    assert await second.release_all("writer-a") == 2
    await second.acquire("writer-b", "/p/a.txt")
    assert await first.held_by("writer-b") == ["/p/a.txt"]

"""The ``nats_cluster`` fixture: a 3-node nats-server JetStream cluster on loopback (consumers/nats_cluster.py).

It yields the running :class:`NatsCluster`: ``.urls`` are the node URLs (``.servers_url`` joins them for
``nats.connect``/``TURNSTILE_NATS_URL``), ``kill(i)`` SIGKILLs a node and ``restart(i)`` brings it back.
The nodes run without the roles file (an open server), like the single-node ``nats_server`` fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from consumers.nats_cluster import NatsCluster


@pytest.fixture
async def nats_cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    cluster = NatsCluster(store_root=tmp_path / "nats-cluster", size=3)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()

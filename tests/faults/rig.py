"""The fault suite's rig: a real nats-server, a real ``turnstile run`` child, paced load, faults, the soak oracle.

Every case builds one ``FaultRig``, publishes through it (each accepted message is recorded as the soak driver
records it), injects its fault, then calls ``settle``: the service must serve a message published after the fault
within ``serve_bound_s`` and account for every accepted message within ``drain_bound_s``; the soak's oracle
(tests/soak/oracle.py) then checks answered-once-or-dropped, per-session order and the generation clauses.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import nats
import orjson
from nats.aio.client import Client
from nats.js.api import PubAck
from nats.js.errors import APIError, ServiceUnavailableError

from consumers.nats_server import NatsServer
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.faults.service import FaultService
from tests.integration.harness import inbound, wait_for
from tests.soak.config import SoakConfig
from tests.soak.driver import read_facts
from tests.soak.oracle import OracleReport, StreamFacts, evaluate, summary_table, unaccounted
from tests.soak.record import Published, SoakRecord

READY_TIMEOUT_S = 60.0
PUBLISH_DEADLINE_S = 30.0


class FaultRig:
    """One broker, one service process, one record of what was accepted."""

    def __init__(
        self,
        workdir: Path,
        *,
        env: dict[str, str] | None = None,
        server_config: Path | None = None,
        module: str = "consumers.cli",
        drain_bound_s: float = 60.0,
        serve_bound_s: float = 30.0,
    ) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.server = NatsServer(store_dir=workdir / "nats", config=server_config)
        self.env = dict(env or {})
        self.module = module
        self.drain_bound_s = drain_bound_s
        self.serve_bound_s = serve_bound_s
        self.prefix = "f" + uuid.uuid4().hex[:8]
        self.subjects = Subjects(self.prefix)
        self.db_path = workdir / "turnstile.db"
        self.config = SoakConfig(
            seed=0, sessions=0, messages=0, kills=0, deletions=0, rate_per_s=0.0, drain_bound_s=drain_bound_s
        )
        self.record = SoakRecord(self.config, self.prefix, time.time())
        self.refused: list[str] = []  # publishes the broker refused (not accepted, so not owed an answer)
        self.nc: Client | None = None
        self.service: FaultService | None = None
        self.served_after_s: float | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self, *, wait_ready: bool = True) -> FaultRig:
        await self.server.start()
        self.nc = await nats.connect(
            self.server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2, error_cb=_quiet
        )
        settings = Settings.model_validate(
            {"nats_url": self.server.url, "database_url": f"sqlite+aiosqlite:///{self.db_path}", "prefix": self.prefix}
        )
        self.service = FaultService(settings, self.workdir / "service.log", self.env, self.module)
        await self.service.start()
        if wait_ready:
            await self.wait_ready()
        return self

    async def wait_ready(self) -> None:
        assert self.service is not None
        await self.service.wait_ready(self.client, timeout_s=READY_TIMEOUT_S)

    async def close(self) -> None:
        if self.service is not None:
            if self.service.running:
                self.service.resume()
            await self.service.stop()
        if self.nc is not None:
            await self.nc.close()
        await self.server.stop()

    async def __aenter__(self) -> FaultRig:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    @property
    def client(self) -> Client:
        assert self.nc is not None
        return self.nc

    @property
    def proc(self) -> FaultService:
        assert self.service is not None
        return self.service

    # -- load ------------------------------------------------------------------------------------------------
    async def publish(
        self, sid: str, index: int, directives: str = "", *, deadline_s: float = PUBLISH_DEADLINE_S
    ) -> Published | None:
        """Publish message ``index`` of ``sid``, retried with the same id until acked or refused for good.

        A refusal by the broker (``APIError``: stream full, store full, …) is recorded in
        ``refused`` and returns None: the message was not accepted."""
        text = f"fault {sid} #{index}"
        body = inbound(sid, directives + text)
        js = self.client.jetstream()
        sent_at = time.time()
        deadline = time.monotonic() + deadline_s
        ack: PubAck | None = None
        while ack is None:
            try:
                ack = await js.publish(
                    self.subjects.inbound("cli", sid), orjson.dumps(body), headers={"Nats-Msg-Id": body["id"]},
                    timeout=2.0,
                )
            except APIError as exc:
                if isinstance(exc, ServiceUnavailableError) and exc.err_code is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)  # JetStream not answering yet (broker restarting): not a refusal
                    continue
                self.refused.append(f"{body['id']}: {exc.description or exc}")
                return None
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)  # retry pacing while the broker is away
        published = Published(body["id"], sid, index, text, ack.seq, sent_at, time.time())
        self.record.published.append(published)
        return published

    async def load(
        self, sessions: list[str], messages: int, rate_per_s: float, directives: Callable[[int], str] | None = None
    ) -> None:
        """``messages`` per session, interleaved round-robin, paced at ``rate_per_s`` (in publish order)."""
        t0 = time.monotonic()
        slot = 0
        for index in range(messages):
            for sid in sessions:
                # Pacing of the load, not a wait for a condition.
                await asyncio.sleep(max(0.0, t0 + slot / rate_per_s - time.monotonic()))
                await self.publish(sid, index, directives(slot) if directives else "")
                slot += 1

    # -- faults ----------------------------------------------------------------------------------------------
    def fault_ended(self) -> None:
        self.record.last_fault_at = time.time()

    async def kill_service(self) -> None:
        await self.proc.kill()

    async def restart_service(self) -> None:
        await self.proc.start()
        await self.wait_ready()

    async def kill_broker(self) -> None:
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGKILL)
        await self.server.process.wait()
        await self.server.stop()

    async def restart_broker(self) -> None:
        await self.server.start()  # same port and store

    def pause_broker(self) -> None:
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGSTOP)

    def resume_broker(self) -> None:
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGCONT)

    # -- oracle ----------------------------------------------------------------------------------------------
    async def probe(self) -> float:
        """Seconds from the end of the last fault until a message published now is answered."""
        if not self.record.last_fault_at:
            self.fault_ended()
        sid = f"probe-{uuid.uuid4().hex[:6]}"
        published = await self.publish(sid, 0)
        assert published is not None, f"the probe was refused: {self.refused[-1:]}"

        async def answered() -> bool:
            facts = await read_facts(self.client, self.subjects)
            return any(r.body.get("reply_to") == published.msg_id for r in facts.replies)

        await wait_for(answered, timeout_s=self.serve_bound_s, interval_s=0.2, what="the probe's reply")
        self.served_after_s = time.time() - self.record.last_fault_at
        return self.served_after_s

    async def settle(self) -> tuple[OracleReport, StreamFacts]:
        """Probe, then poll until everything is accounted for within the bound; the oracle's report."""
        await self.probe()
        facts = await read_facts(self.client, self.subjects)

        async def all_accounted() -> bool:
            nonlocal facts
            facts = await read_facts(self.client, self.subjects)
            return not unaccounted(self.record.published, facts)

        budget_s = self.record.last_fault_at + self.drain_bound_s - time.time()
        try:
            await wait_for(all_accounted, timeout_s=max(0.0, budget_s), interval_s=0.5, what="every message")
            self.record.drained_after_s = time.time() - self.record.last_fault_at
        except AssertionError:
            self.record.drained_after_s = None
        self.record.finished_at = time.time()
        return evaluate(self.record, facts), facts

    def table(self, report: OracleReport) -> str:
        return summary_table(self.record, report)


async def _quiet(_exc: Exception) -> None:
    """The test client's errors while the broker is away are expected; the oracle judges the outcome."""


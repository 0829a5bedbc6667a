"""Runs one soak: a real nats-server, a real ``turnstile run`` child killed with SIGKILL, paced inbound, deletions.

``run_soak`` is what the pytest test and ``python -m tests.soak`` both call; it returns the driver's record
and the oracle's report (tests/soak/oracle.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import PubAck
from tenacity import AsyncRetrying, stop_after_attempt, wait_fixed

from consumers.nats_server import NatsServer
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import api, inbound, wait_for
from tests.integration.service_process import ServiceProcess
from tests.soak.config import SoakConfig
from tests.soak.databases import soak_database
from tests.soak.oracle import OracleReport, StreamFacts, evaluate, unaccounted
from tests.soak.plan import KILL_TRIGGERS, DeletionPlan, KillPlan, make_plan
from tests.soak.record import Deletion, Kill, Published, SoakRecord
from tests.soak.stored import read_stream

READY_TIMEOUT_S = 60.0
TRIGGER_TIMEOUT_S = 3.0


async def read_facts(nc: Client, subjects: Subjects) -> StreamFacts:
    """What the outbound, events and DLQ streams hold now."""
    js = nc.jetstream()
    events = subjects.events_stream
    return StreamFacts(
        replies=await read_stream(js, subjects.outbound_stream, subjects.outbound_all),
        dropped=await read_stream(js, events, f"{subjects.prefix}.events.*.message.dropped"),
        deleted=await read_stream(js, events, f"{subjects.prefix}.events.*.session.deleted"),
        dead_letters=await read_stream(js, subjects.dlq_stream, subjects.dlq_all),
    )


class SoakDriver:
    """Publishes, kills and deletes on one plan, concurrently; kills and deletions never overlap."""

    def __init__(self, config: SoakConfig, nc: Client, service: ServiceProcess, record: SoakRecord) -> None:
        self.config = config
        self.nc = nc
        self.service = service
        self.record = record
        self.subjects = Subjects(record.prefix)
        tag = uuid.uuid4().hex[:6]
        self.session_ids = [f"soak-{tag}-{i:03d}" for i in range(config.sessions)]
        self._faults = asyncio.Lock()  # a deletion is never cut by a kill: its timeline stays readable
        self._t0 = 0.0
        self._triggers = {t: asyncio.Event() for t in KILL_TRIGGERS if t != "timer"}

    async def _on_reply(self, _msg: Msg) -> None:
        self._triggers["after_reply"].set()

    async def run(self) -> None:
        plan = make_plan(self.config)
        replies = await self.nc.subscribe(self.subjects.outbound_all, cb=self._on_reply)  # kill trigger only
        self._t0 = time.monotonic()
        try:
            await asyncio.gather(
                self._publish(plan.order, plan.directives), self._kill(plan.kills), self._delete(plan.deletions)
            )
        finally:
            await replies.unsubscribe()
        ends = [k.ready_at for k in self.record.kills] + [d.done_at for d in self.record.deletions]
        ends += [p.acked_at for p in self.record.published[-1:]]
        self.record.last_fault_at = max(ends, default=time.time())

    async def _at(self, offset_s: float) -> None:
        # Pacing of the load and fault schedule, not a wait for a condition.
        await asyncio.sleep(max(0.0, self._t0 + offset_s - time.monotonic()))

    async def _publish(self, order: list[int], directives: list[str]) -> None:
        js = self.nc.jetstream()
        counts = [0] * len(self.session_ids)
        for slot, s in enumerate(order):
            await self._at(slot / self.config.rate_per_s)
            sid, n = self.session_ids[s], counts[s]
            counts[s] += 1
            text = f"soak {sid} #{n}"
            body = inbound(sid, directives[slot] + text)
            sent_at = time.time()
            ack: PubAck | None = None
            async for attempt in AsyncRetrying(stop=stop_after_attempt(5), wait=wait_fixed(0.2), reraise=True):
                with attempt:
                    ack = await js.publish(
                        self.subjects.inbound("cli", sid), orjson.dumps(body), headers={"Nats-Msg-Id": body["id"]}
                    )
            assert ack is not None
            self.record.published.append(Published(body["id"], sid, n, text, ack.seq, sent_at, time.time()))
            self._triggers["after_publish"].set()

    async def _kill(self, kills: list[KillPlan]) -> None:
        for k in kills:
            await self._at(k.at_s)
            async with self._faults:
                if k.trigger in self._triggers:
                    trigger = self._triggers[k.trigger]
                    trigger.clear()
                    with contextlib.suppress(TimeoutError):  # nothing happened for a while: kill now
                        await asyncio.wait_for(trigger.wait(), TRIGGER_TIMEOUT_S)
                killed_at = time.time()
                await self.service.kill()
                await asyncio.sleep(k.restart_delay_s)  # the downtime under test, drawn from [0, 3 × window]
                await self.service.start()
                await self.service.wait_ready(self.nc, timeout_s=READY_TIMEOUT_S)
                self.record.kills.append(Kill(killed_at, k.restart_delay_s, time.time(), k.trigger))

    async def _delete(self, deletions: list[DeletionPlan]) -> None:
        for d in deletions:
            await self._at(d.at_s)
            sid = self.session_ids[d.session]
            async with self._faults:

                async def exists(sid: str = sid) -> bool:
                    got = await api(self.nc, self.subjects, "session", "get", {"session_id": sid})
                    return bool(got.get("ok"))

                try:
                    await wait_for(exists, timeout_s=20, interval_s=0.1, what=f"session {sid} to exist")
                except AssertionError as exc:
                    self.record.skipped_deletions.append(f"{sid}: {exc}")
                    continue
                before = await self._generation(sid)
                requested_at = time.time()
                try:
                    reply = await api(self.nc, self.subjects, "session", "delete", {"session_id": sid})
                except Exception as exc:  # no answer in time: the generation tells whether it happened
                    reply = {"ok": False, "error": repr(exc)}
                    generation = await self._generation(sid)
                    if generation != before:
                        reply = {"ok": True, "result": {"generation": generation}}
                done_at = time.time()
                if reply.get("ok"):
                    generation = int(reply["result"]["generation"])
                    self.record.deletions.append(Deletion(sid, requested_at, done_at, generation))
                else:
                    self.record.skipped_deletions.append(f"{sid}: {reply.get('error')}")

    async def _generation(self, sid: str) -> int:
        got = await api(self.nc, self.subjects, "session", "generation", {"session_id": sid})
        return int(got["result"]["generation"])

    async def drain(self) -> StreamFacts:
        """Clause 4: poll the streams until every accepted message is accounted for, within the bound."""
        facts = await read_facts(self.nc, self.subjects)

        async def all_accounted() -> bool:
            nonlocal facts
            facts = await read_facts(self.nc, self.subjects)
            return not unaccounted(self.record.published, facts)

        budget_s = self.record.last_fault_at + self.config.drain_bound_s - time.time()
        try:
            await wait_for(all_accounted, timeout_s=max(0.0, budget_s), interval_s=0.5, what="every message")
            self.record.drained_after_s = time.time() - self.record.last_fault_at
        except AssertionError:
            self.record.drained_after_s = None
        return facts


async def run_soak(config: SoakConfig, workdir: Path) -> tuple[SoakRecord, OracleReport]:
    """One whole soak in ``workdir`` (nats store, SQLite file, service log)."""
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, before the soak starts anything)
    async with NatsServer(store_dir=workdir / "nats") as server, soak_database(config.database, workdir) as db_url:
        nc = await nats.connect(server.url)
        try:
            prefix = "soak" + uuid.uuid4().hex[:8]
            settings = Settings.model_validate({"nats_url": server.url, "database_url": db_url, "prefix": prefix})
            extra_env = {
                "TURNSTILE_DUPLICATE_WINDOW_S": str(config.duplicate_window_s),
                "TURNSTILE_LEASE_TTL_S": str(config.lease_ttl_s),
                "TURNSTILE_ACK_WAIT_S": str(config.ack_wait_s),
            }
            service = ServiceProcess(settings, workdir / "service.log", extra_env=extra_env)
            record = SoakRecord(config, settings.prefix, time.time())
            try:
                await service.start()
                await service.wait_ready(nc, timeout_s=READY_TIMEOUT_S)
                driver = SoakDriver(config, nc, service, record)
                await driver.run()
                facts = await driver.drain()
                facts = await read_facts(nc, driver.subjects)
            finally:
                await service.stop()
            record.finished_at = time.time()
            return record, evaluate(record, facts)
        finally:
            await nc.close()

"""The guarantee floor: baseline A's raw nats-py loop plus exactly the ordering and durability turnstile guarantees.

What it adds to baseline A (bench/baseline.py), and nothing else (no turn engine, no
transcript, no pydantic, no events beyond the measured count):

- **ack after staging**: a fetched batch is inserted into an inbox table in one
  group transaction; its messages are acked only after that commit;
- **journal before checkpoint**: per message the user message is appended to a journal
  table and committed before the first checkpoint is published; the answer is appended and
  committed before the second;
- **fenced checkpoints**: each checkpoint carries ``Nats-Expected-Last-Subject-Sequence`` of
  the session's previous one, so the next checkpoint waits for the previous ack (a serial
  round trip per checkpoint after the first of a message, whose ack overlaps the answer's
  journal commit, as in ``consumers/checkpoints.py``);
- **ownership proof before the reply**: the reply is published only after the last
  checkpoint's ack;
- **per-session order**: one session's messages are served one after another (a chain of
  tasks per session); sessions run concurrently, at most ``max_concurrent_turns`` at once.
- **events and replies stored once**: each carries a ``Nats-Msg-Id`` (an event's as turnstile's
  publisher makes it, ``bench.shape.EventIds``), so a copy sent again after a lost answer is dropped.

SQL (bench/floor_store.py): one SQLite file with turnstile's pragmas (``--db``), or a PostgreSQL
database (``--pg-url``, workers ``floor/pg`` and ``floor+engine/pg``); all writes through one group
committer (every write queued during a transaction goes into the next one; on PostgreSQL a group is
one autocommit statement, one round trip). Event and reply acks are awaited without holding the
session back (turnstile pipelines them too).

``--engine`` (worker ``floor+engine``) adds turnstile's turn engine (bench/floor_engine.py): its journal
entries are the rows committed, its complete snapshots the checkpoints published (instead of the
shape's size in ``x``), its answer the reply's text; the process then runs with the service's garbage
collector and allocator settings (``tune_gc``, the idle collections of ``consumers/idle_gc.py``,
``tune_malloc``), as ``turnstile run`` does.

Run as a child process: ``python -m bench.floor --nats-url … --prefix … --shape JSON (--db PATH | --pg-url URL) [--engine]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from bench.baseline import MAX_RETRIES, RETRY_DELAY_S, TOO_MANY_REQUESTS, baseline_settings
from bench.floor_engine import EngineTurns
from bench.floor_store import FloorStore, PgStore, SqliteStore
from bench.shape import EventIds, PublishShape, Spreader, payload_size
from bench.worker_link import open_worker
from consumers.cli import tune_gc
from consumers.idle_gc import run_collecting_when_idle
from consumers.malloc_tuning import tune_malloc
from consumers.nats_flush import flush
from consumers.settings import Settings
from schemas.subjects import Subjects
from schemas.tokens import encode_sid

READY = "floor ready"
FENCE = "Nats-Expected-Last-Subject-Sequence"


async def publish(js: JetStreamContext, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> int:
    """Publish, await the ack, return the stream sequence; bounded retries on the server's 429 (as baseline A)."""
    for attempt in range(MAX_RETRIES):
        try:
            ack = await js.publish(subject, payload, headers=headers, timeout=30)
            return int(ack.seq)
        except APIError as exc:
            if exc.err_code != TOO_MANY_REQUESTS or attempt == MAX_RETRIES - 1:
                raise
            await asyncio.sleep(RETRY_DELAY_S * (1 + attempt % 10))
    raise AssertionError("unreachable")


class Floor:
    """Per-message work of the floor; one instance per process."""

    def __init__(
        self, js: JetStreamContext, prefix: str, shape: PublishShape, store: FloorStore, max_turns: int,
        engine: EngineTurns | None = None,
    ) -> None:
        self.js = js
        self.engine = engine
        self.prefix = prefix
        self.store = store
        self.turns = asyncio.Semaphore(max_turns)
        subjects = Subjects(prefix)
        self.ck_stream = subjects.checkpoint_stream
        ck, ev, out = shape.streams["checkpoint"], shape.streams["events"], shape.streams["outbound"]
        self.ck_spread, self.ev_spread, self.out_spread = Spreader(ck.per_msg), Spreader(ev.per_msg), Spreader(out.per_msg)
        sample = "bench-00000000-0"
        fence_header = len(f"NATS/1.0\r\n{FENCE}: 1000000\r\n\r\n")
        self.ck_payload = b"x" * payload_size(ck.stored_bytes_per_msg, subjects.checkpoint(sample), fence_header)
        self.event_ids = EventIds()  # an event's Nats-Msg-Id: stored once when sent again after a lost answer
        self.ev_payload = b"x" * payload_size(
            ev.stored_bytes_per_msg, f"{prefix}.events.{encode_sid(sample)}.turn.ended", self.event_ids.header_bytes
        )
        msg_id_header = len(f"NATS/1.0\r\nNats-Msg-Id: {sample}:{'0' * 32}:0\r\n\r\n")
        self.out_size = payload_size(out.stored_bytes_per_msg, subjects.outbound("cli", sample), msg_id_header)
        self.last_ck: dict[str, int] = {}  # session → sequence of its last checkpoint (the fence)
        self.journal_seq: dict[str, int] = {}
        self.tails: dict[str, asyncio.Task[None]] = {}
        self.background: set[asyncio.Task[Any]] = set()
        self.answered = 0

    async def stage(self, msgs: list[Msg]) -> list[dict[str, Any]]:
        """Insert the batch into the inbox (one group transaction), then ack it: ack after staging."""
        inbound = [orjson.loads(m.data) for m in msgs]
        now = time.time()
        rows = [(d["id"], d["session_id"], m.data, now) for d, m in zip(inbound, msgs, strict=True)]
        await self.store.write(("inbox", rows))
        await asyncio.gather(*(m.ack() for m in msgs))
        return inbound

    def dispatch(self, inbound: dict[str, Any]) -> asyncio.Task[None]:
        """Serve after the session's previous message (per-session order)."""
        sid = inbound["session_id"]
        task = asyncio.get_running_loop().create_task(self._serve(inbound, self.tails.get(sid)))
        self.tails[sid] = task
        task.add_done_callback(functools.partial(self._forget_tail, sid))
        return task

    def _forget_tail(self, sid: str, task: asyncio.Task[None]) -> None:
        if self.tails.get(sid) is task:
            del self.tails[sid]

    async def _journal(self, sid: str, kind: str, body: bytes) -> None:
        seq = self.journal_seq.get(sid, 0) + 1
        self.journal_seq[sid] = seq
        await self.store.write(("journal", [(sid, seq, kind, body)]))

    async def _load(self, sid: str, ck_subject: str) -> None:
        """A session this process has not served: its journal position from SQL and, if it has
        one, its fence from the checkpoint stream's last message (turnstile restores from it too)."""
        self.journal_seq[sid] = await self.store.max_seq(sid)
        fence = 0
        if self.journal_seq[sid]:
            with contextlib.suppress(NotFoundError):
                fence = int((await self.js.get_last_msg(self.ck_stream, ck_subject)).seq or 0)
        self.last_ck[sid] = fence

    def _checkpoint(self, subject: str, sid: str, payload: bytes | None = None) -> asyncio.Task[int]:
        body = self.ck_payload if payload is None else payload
        return asyncio.ensure_future(publish(self.js, subject, body, {FENCE: str(self.last_ck.get(sid, 0))}))

    def _in_background(self, aw: Any) -> None:
        task = asyncio.ensure_future(aw)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _serve(self, inbound: dict[str, Any], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            async with self.turns:
                await self._turn(inbound)
        except Exception as exc:
            print(f"message {inbound.get('id')} failed: {exc!r}", file=sys.stderr, flush=True)

    async def _turn(self, inbound: dict[str, Any]) -> None:
        sid = inbound["session_id"]
        token = encode_sid(sid)
        ck_subject = f"{self.prefix}.checkpoint.{token}"
        if sid not in self.last_ck:
            await self._load(sid, ck_subject)
        if self.engine is not None:
            text = await self._engine_turn(inbound, ck_subject)
        else:
            checkpoints = self.ck_spread.take()
            text = "echo: " + inbound["text"]
            await self._journal(sid, "user", inbound["text"].encode())
            first = self._checkpoint(ck_subject, sid) if checkpoints else None
            await self._journal(sid, "answer", text.encode())  # overlaps the first checkpoint's round trip
            if first is not None:
                self.last_ck[sid] = await first
            for _ in range(checkpoints - 1):  # each fenced on the previous one: a serial round trip
                self.last_ck[sid] = await self._checkpoint(ck_subject, sid)
        for _ in range(self.ev_spread.take()):
            self._in_background(publish(self.js, f"{self.prefix}.events.{token}.turn.ended", self.ev_payload,
                                        self.event_ids.headers()))
        for seq in range(max(1, self.out_spread.take())):  # every message answered, as in baseline A
            reply = {"session_id": sid, "generation": 1, "turn_id": inbound["id"], "seq": seq,
                     "reply_to": inbound["id"], "text": text}
            body = orjson.dumps(reply)
            body += b" " * max(0, self.out_size - len(body))
            self._in_background(publish(self.js, f"{self.prefix}.outbound.{inbound['platform']}.{token}", body,
                                        {"Nats-Msg-Id": f"{sid}:{inbound['id']}:{seq}"}))
        self.answered += 1

    async def _engine_turn(self, inbound: dict[str, Any], ck_subject: str) -> str:
        """The engine's turn: each snapshot published fenced on the previous one's ack (which overlaps the
        next step's work, as in ``consumers/checkpoints.py``); returns after the last one's ack."""
        assert self.engine is not None
        sid = inbound["session_id"]
        pending: list[asyncio.Task[int]] = []

        async def checkpoint(raw: bytes) -> None:
            if pending:
                self.last_ck[sid] = await pending.pop()
            pending.append(self._checkpoint(ck_subject, sid, raw))

        text = await self.engine.turn(inbound, checkpoint)
        if pending:
            self.last_ck[sid] = await pending.pop()  # ownership proof before the reply
        return text


async def _wait_for_go(nc: Any, prefix: str, stop: asyncio.Event, max_s: float) -> None:
    go = await nc.subscribe(f"{prefix}.bench.go")
    await flush(nc)
    print(READY, flush=True)
    go_msg = asyncio.ensure_future(go.next_msg(timeout=max_s))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({go_msg, stopped}, return_when=asyncio.FIRST_COMPLETED)
    go_msg.cancel()
    stopped.cancel()


async def open_store(db: Path | None, pg_url: str | None) -> FloorStore:
    """The SQLite file ``db`` (turnstile's ``synchronous`` setting), or the PostgreSQL database at ``pg_url``."""
    if pg_url is not None:
        return await PgStore.open(pg_url)
    assert db is not None
    return SqliteStore(db, Settings().sqlite_synchronous)


async def run(
    nats_url: str, prefix: str, shape: PublishShape, db: Path | None, max_s: float, engine: bool = False,
    pg_url: str | None = None,
) -> None:
    link = await open_worker(baseline_settings(nats_url, prefix), max_s)
    settings, subjects, nc, js, psub, stop = link.settings, link.subjects, link.nc, link.js, link.psub, link.stop
    store = await open_store(db, pg_url)
    turns = None
    if engine:  # the engine's sessions are long-lived objects: the service's collector and allocator settings
        service_settings = Settings()
        tune_gc(service_settings.gc_threshold)
        if service_settings.malloc_mmap_threshold:
            tune_malloc(service_settings.malloc_mmap_threshold)
        turns = EngineTurns(store)
    floor = Floor(js, prefix, shape, store, settings.max_concurrent_turns, turns)
    await _wait_for_go(nc, prefix, stop, max_s)

    in_flight = asyncio.Semaphore(settings.max_inbound_in_flight)  # staged, not yet answered
    silent = 0
    while not stop.is_set():
        try:
            msgs = await psub.fetch(settings.fetch_batch, timeout=settings.fetch_timeout_s)
        except (NatsTimeoutError, TimeoutError):
            silent += 1  # nats.py #504: a pull subscription can go silent; after two silent fetches bind afresh
            if silent >= 2:
                silent = 0
                info = await js.consumer_info(subjects.inbound_stream, settings.consumer_name)
                if info.num_pending:
                    await psub.unsubscribe()
                    psub = await js.pull_subscribe_bind(durable=settings.consumer_name, stream=subjects.inbound_stream)
            continue
        except Exception as exc:  # a closed connection at shutdown
            if stop.is_set():
                break
            print(f"fetch failed: {exc!r}; binding afresh", file=sys.stderr, flush=True)
            await asyncio.sleep(0.2)
            await psub.unsubscribe()
            psub = await js.pull_subscribe_bind(durable=settings.consumer_name, stream=subjects.inbound_stream)
            continue
        silent = 0
        for _ in msgs:
            await in_flight.acquire()
        for inbound in await floor.stage(msgs):
            floor.dispatch(inbound).add_done_callback(_release(in_flight))
    print(f"floor answered {floor.answered} messages in {store.group.transactions} SQL transactions", flush=True)
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception as exc:
        print(f"closing the connection: {exc!r}", file=sys.stderr, flush=True)
    await store.close()


def _release(sem: asyncio.Semaphore) -> Callable[[Any], None]:
    return lambda _task: sem.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--shape", required=True, help="PublishShape as JSON")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", type=Path, help="SQLite file (created)")
    where.add_argument("--pg-url", help="PostgreSQL database (postgresql://…; its tables are created)")
    parser.add_argument("--max-s", type=float, default=600.0, help="stop by itself after this")
    parser.add_argument("--engine", action="store_true", help="run turnstile's turn engine (bench/floor_engine.py)")
    args = parser.parse_args()
    shape = PublishShape.from_dict(orjson.loads(args.shape))
    started = time.monotonic()
    idle_threshold = Settings().gc_idle_threshold if args.engine else 0
    run_collecting_when_idle(run(args.nats_url, args.prefix, shape, args.db, args.max_s, args.engine, args.pg_url), idle_threshold)
    print(f"floor stopped after {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()

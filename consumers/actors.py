"""Per-session actors: one asyncio task and mailbox per active session.

One session's turns never overlap; different sessions run concurrently up to
``max_concurrent_turns``. An idle actor is evicted and its session is restored
from its last checkpoint on JetStream when the next message arrives (MQ-2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from consumers.turns import TurnRunner
from core.store.inbox import StagedMessage
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)


@dataclass
class Work:
    """One staged inbound message for an actor."""

    staged: StagedMessage
    inbound: InboundMessage


@dataclass
class SessionActor:
    """The single owner of one session inside this process."""

    session_id: str
    runner: TurnRunner
    idle_s: float
    on_exit: Callable[[SessionActor], None]
    mailbox: asyncio.Queue[Work] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    busy: bool = False

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"actor:{self.session_id}")

    async def _run(self) -> None:
        try:
            while True:
                try:
                    work = await asyncio.wait_for(self.mailbox.get(), self.idle_s)
                except TimeoutError:
                    if self.mailbox.empty():
                        return
                    continue
                self.busy = True
                try:
                    await self.runner.handle(work.staged, work.inbound)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("session %s: handling %s failed", self.session_id, work.staged.message_id)
                finally:
                    self.busy = False
                    self.mailbox.task_done()
        finally:
            self.on_exit(self)


class ActorRegistry:
    """Creates, feeds and evicts session actors; ``join()`` waits until all mailboxes are drained."""

    def __init__(self, make_runner: Callable[[str], TurnRunner], idle_s: float) -> None:
        self._make_runner = make_runner
        self._idle_s = idle_s
        self._actors: dict[str, SessionActor] = {}
        self._closing = False

    def __len__(self) -> int:
        return len(self._actors)

    def get(self, session_id: str) -> SessionActor | None:
        return self._actors.get(session_id)

    async def deliver(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Put a staged message into its session's mailbox (creating the actor on demand)."""
        if self._closing:
            return  # still staged: replayed from the inbox at the next start
        sid = staged.session_id or ""
        actor = self._actors.get(sid)
        if actor is None or actor.task is None or actor.task.done():
            actor = SessionActor(sid, self._make_runner(sid), self._idle_s, self._forget)
            self._actors[sid] = actor
            actor.start()
        actor.runner.notice_arrival(inbound, busy=actor.busy)
        actor.mailbox.put_nowait(Work(staged, inbound))

    def _forget(self, actor: SessionActor) -> None:
        if self._actors.get(actor.session_id) is actor:
            del self._actors[actor.session_id]
        # A message may have slipped in between the idle timeout and exit: serve it.
        if not actor.mailbox.empty() and not self._closing:
            fresh = SessionActor(actor.session_id, actor.runner, self._idle_s, self._forget)
            fresh.mailbox = actor.mailbox
            self._actors[actor.session_id] = fresh
            fresh.start()

    async def stop_session(self, session_id: str) -> None:
        """Stop the session's running turn and forget its loaded state (used by deletion)."""
        actor = self._actors.get(session_id)
        if actor is not None:
            await actor.runner.stop_running_turn()
            actor.runner.unload()

    async def join(self, timeout_s: float | None = None) -> None:
        """Wait until every mailbox is drained (tests and graceful shutdown)."""

        async def _all() -> None:
            while True:
                actors = list(self._actors.values())
                if not actors:
                    return
                await asyncio.gather(*(a.mailbox.join() for a in actors))
                if all(a.mailbox.empty() and not a.busy for a in self._actors.values()):
                    return

        await asyncio.wait_for(_all(), timeout_s)

    async def close(self, drain_timeout_s: float = 10.0) -> None:
        """Stop taking work, let running turns finish within the timeout, then cancel the rest.

        Work still in a mailbox stays staged in the inbox and is replayed at the next start.
        """
        self._closing = True
        actors = list(self._actors.values())
        for a in actors:
            while not a.mailbox.empty():
                a.mailbox.get_nowait()
                a.mailbox.task_done()
        idle = [a.task for a in actors if a.task is not None and not a.busy]
        busy = [a.task for a in actors if a.task is not None and a.busy]
        for t in idle:
            t.cancel()
        if busy:
            _, pending = await asyncio.wait(busy, timeout=drain_timeout_s)
            for t in pending:
                t.cancel()
        await asyncio.gather(*idle, *busy, return_exceptions=True)
        for a in actors:
            await a.runner.release()
        self._actors.clear()

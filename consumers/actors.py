"""Per-session actors: one asyncio task and mailbox per active session.

One session's turns never overlap; different sessions run concurrently up to
``max_concurrent_turns``. An idle actor is evicted and its session is restored
from its last checkpoint on JetStream when the next message arrives (MQ-2).

The mailbox carries two kinds of work: staged inbound messages (``Work``) and
control commands (``Command``, e.g. ``session.interrupt`` or ``turn.free_time``)
that must touch the session's engine state without ever overlapping a turn.
Commands are served before queued messages (but never preempt the item being
handled); among themselves, and among messages, arrival order holds.

Deletion (SM-21) stops a session with ``ActorRegistry.stopped``: the running item is
cancelled and awaited, and the actor starts no new item until the clear is done.

Partitioned ownership (``ActorRegistry.fence``): once the session's partition is not ours by
the local lease before an item, or an item is given up as owned elsewhere (``OwnershipLost``),
the actor serves nothing more of the session until the lease is confirmed ours again; then it
serves the session's staged messages from the inbox in staging order (a moved partition's actor
is stopped by ``release_sessions`` instead, and the new owner replays them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from consumers.admission import WorkAdmission
from consumers.checkpoint_prefetch import CheckpointPrefetch
from consumers.deadline import Deadline
from consumers.heap_trim import HeapTrim
from consumers.retry_policy import OwnershipLost
from consumers.task_stop import cancel_and_wait
from consumers.turn_runner import TurnRunner
from core.engine.policy import MidTurnAction
from core.errors import Unavailable
from core.store.inbox import StagedMessage
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)

# How long a deletion waits for the session's running item to stop before it clears anyway
# (a write stuck in the store); what the item writes later stays in its old generation.
STOP_WAIT_S = 10.0
# An actor past the loaded cap whose last item is still landing (a reply not yet confirmed stored)
# looks again this often, rather than sitting loaded until ``idle_s`` with nothing left to do.
RETIRE_RETRY_S = 0.5
REPLAY_RETRY_S = 1.0  # a session in doubt whose staged messages could not be read tries again after this

Reply = Callable[[Any], None]
CommandFn = Callable[[TurnRunner, Reply], Awaitable[Any]]


@dataclass
class Work:
    """One staged inbound message for an actor."""

    staged: StagedMessage
    inbound: InboundMessage
    queued_at: float = field(default_factory=time.monotonic)  # reply latency starts here


@dataclass
class Command:
    """A control command run inside the actor; ``result`` resolves with its reply.

    ``run(runner, reply)`` may call ``reply(value)`` early (e.g. once a free-time
    opening is staged) and keep going; otherwise its return value is the reply.
    """

    name: str
    run: CommandFn
    result: asyncio.Future[Any]


Item = Work | Command


class Mailbox:
    """An actor's queue: commands before messages, arrival order within each; its one consumer waits
    with an idle deadline.

    In place of an ``asyncio.PriorityQueue`` and an ``asyncio.timeout`` around each wait: a message
    that finds its actor waiting (paced traffic: every one) cost a getter future, a heap push and pop,
    and a timer armed and cancelled. Here a wait is one future, and the idle deadline one timer
    kept across waits (``consumers/deadline.py``).
    ``task_done``/``join`` count unfinished items as ``asyncio.Queue`` does.

    Every loaded session has one, so it holds one ``deque`` (760 B empty) and nothing else that is
    not needed yet: the commands' deque is made by the first command, the wait's future by each wait
    (as ``asyncio.Event.wait`` did, without the event's deque of waiters) and ``join``'s only by a join.
    """

    def __init__(self) -> None:
        self._commands: deque[Command] | None = None
        self._messages: deque[Work] = deque()
        self._waiter: asyncio.Future[None] | None = None  # done by a put, or once the wait's deadline has passed
        self._deadline = Deadline()
        self._unfinished = 0
        self._joined: asyncio.Future[None] | None = None  # done once no item is unfinished

    def empty(self) -> bool:
        return not (self._commands or self._messages)

    def qsize(self) -> int:
        return len(self._commands or ()) + len(self._messages)

    def put(self, item: Item) -> None:
        """Queue ``item`` behind the others of its kind."""
        if isinstance(item, Command):
            self._command_queue().append(item)
        else:
            self._messages.append(item)
        self._added()

    def put_back(self, item: Item) -> None:
        """Queue ``item`` (just taken) again in its place: ahead of the others of its kind."""
        if isinstance(item, Command):
            self._command_queue().appendleft(item)
        else:
            self._messages.appendleft(item)
        self._added()

    def _command_queue(self) -> deque[Command]:
        if self._commands is None:
            self._commands = deque()
        return self._commands

    def _added(self) -> None:
        self._unfinished += 1
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> Item:
        """The next item: a command first; IndexError when empty."""
        return self._commands.popleft() if self._commands else self._messages.popleft()

    def take_all(self) -> list[Item]:
        """Every queued item, in serving order (each still to be marked ``task_done``)."""
        items: list[Item] = [*(self._commands or ()), *self._messages]
        self._commands = None
        self._messages.clear()
        return items

    async def wait(self, timeout_s: float) -> bool:
        """Wait until an item is queued; False when ``timeout_s`` passed with none."""
        if not self.empty():
            return True
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._deadline.start(timeout_s, self._wake)
        try:
            await waiter
        finally:
            self._deadline.stop()
            self._waiter = None
        return not self.empty()

    def stop_timer(self) -> None:
        """Its actor ends: its idle timer goes (an armed one would keep the mailbox until it fires)."""
        self._deadline.close()

    def task_done(self) -> None:
        self._unfinished -= 1
        if self._unfinished <= 0:
            self._unfinished = 0
            joined, self._joined = self._joined, None
            if joined is not None and not joined.done():
                joined.set_result(None)

    async def join(self) -> None:
        """Wait until every item put has been marked ``task_done``."""
        if self._unfinished <= 0:
            return
        if self._joined is None:
            self._joined = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._joined)  # shared by the joiners: one giving up leaves it to the others


class OwnershipFence(Protocol):
    """Whether this process may serve a session now (partitioned ownership)."""

    def owns(self, session_id: str) -> bool:
        """Ours by the local lease (no I/O)."""
        ...

    async def reestablished(self, session_id: str) -> list[tuple[StagedMessage, InboundMessage]]:
        """Return once the session is confirmed ours again: its staged, unfinished messages in staging order."""
        ...


@dataclass
class SessionActor:
    """The single owner of one session inside this process."""

    session_id: str
    runner: TurnRunner
    idle_s: float
    on_exit: Callable[[SessionActor], None]
    mailbox: Mailbox = field(default_factory=Mailbox)
    task: asyncio.Task[None] | None = None
    busy: bool = False
    # Awaited before every item: returns once no deletion holds the session.
    held: Callable[[str], Awaitable[None]] | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: bool = False  # set by ``ActorRegistry.close``: end after the item in hand
    waiting: bool = False  # in the mailbox wait, holding no item: it may be evicted
    # Asked after an item when the mailbox is empty: True when the registry is past its cap of
    # loaded sessions and this actor should end now rather than after ``idle_s``.
    retire: Callable[[SessionActor], bool] | None = None
    fence: OwnershipFence | None = None
    retire_retry_s: float = RETIRE_RETRY_S
    # Told whenever it waits on an empty mailbox: the session holds no work now (admission).
    drained: Callable[[SessionActor], None] | None = None

    def evictable(self) -> bool:
        """True when ending it now loses nothing: no item in hand or queued, nothing settling."""
        return self.waiting and not self.busy and self.mailbox.empty() and self.runner.can_unload()

    def start(self) -> None:
        self.idle.set()
        self.task = asyncio.create_task(self._run(), name=f"actor:{self.session_id}")
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        # A cancelled (evicted) task keeps its CancelledError, whose traceback holds ``_run``'s frame and
        # so this actor: with ``task`` still set that is a cycle, which kept every evicted session
        # (runner, mailbox, last item) until a full gc collection, rare under TURNSTILE_GC_THRESHOLD.
        if self.task is task:
            self.task = None

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no item is being handled; False after ``timeout_s``."""
        try:
            await asyncio.wait_for(self.idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _released(self, item: Work | Command) -> None:
        if self.held is None:
            return
        try:
            await self.held(self.session_id)
        except asyncio.CancelledError:
            if isinstance(item, Command) and not item.result.done():
                item.result.set_exception(Unavailable("the service is shutting down"))
            self.mailbox.task_done()
            raise

    def _retire_now(self) -> bool | None:
        """Past the cap with the mailbox empty: True to end now; False to look again after
        ``retire_retry_s`` (its last item still landing); None when it stays loaded."""
        if not (self.mailbox.empty() and self.retire is not None and self.retire(self)):
            return None
        return self.runner.can_unload()

    async def _run(self) -> None:
        retiring = False  # past the cap but its last item still landing: retire once it has landed
        try:
            while True:
                self.waiting = True
                try:
                    if self.mailbox.empty():
                        if self.drained is not None:
                            self.drained(self)
                        queued = await self.mailbox.wait(self.retire_retry_s if retiring else self.idle_s)
                    else:
                        queued = True
                finally:
                    self.waiting = False
                if not queued:  # the idle (or retiring) wait is over with nothing queued
                    if not retiring:
                        if self.runner.can_unload():
                            return
                        # Idle, but an item is still landing or a reply is unconfirmed (reply order):
                        # unloading would forget it, so stay and ask again after another idle wait.
                        continue
                    now = self._retire_now()
                    if now:
                        return
                    retiring = now is False
                    continue
                item = self.mailbox.get_nowait()
                retiring = False
                await self._released(item)
                # Messages only: a command is routed here by ownership already and never waits on it.
                if self.fence is not None and isinstance(item, Work) and not self.fence.owns(self.session_id):
                    self.mailbox.put_back(item)  # still staged: replayed in its place
                    self.mailbox.task_done()
                    await self._replay_when_ours()
                    continue
                self.busy = True
                self.idle.clear()
                self.runner.begin_item()
                handled = False
                abandoned = False
                try:
                    if isinstance(item, Command):
                        await self._serve(item)
                    else:
                        self.runner.received_at = item.queued_at
                        await self.runner.handle(item.staged, item.inbound)
                    handled = True
                    await self.runner.settle_checkpoints()  # no checkpoint stays unacknowledged between items
                except OwnershipLost:
                    abandoned = True  # the message stays staged; nothing later of the session may overtake it
                except asyncio.CancelledError:
                    if isinstance(item, Command) and not item.result.done():
                        item.result.set_exception(Unavailable("the service is shutting down"))
                    raise
                except Exception:
                    what = item.name if isinstance(item, Command) else item.staged.message_id
                    log.exception("session %s: handling %s failed", self.session_id, what)
                    if isinstance(item, Work) and not handled:
                        # Not even dead-lettered (the broker is away): served again, still ahead
                        # of the session's later messages (its place in the mailbox is kept).
                        self.mailbox.put_back(item)
                finally:
                    self.busy = False
                    self.idle.set()
                    self.mailbox.task_done()
                if self.stopping:
                    return  # shutting down: never sit in the idle wait
                if abandoned and self.fence is not None:
                    await self._replay_when_ours()
                if self.mailbox.empty() and self.retire is not None and self.retire(self):
                    await self.runner.wait_finished()
                    # Asked again: others past the cap may have ended meanwhile (no retiring below it).
                    now = self._retire_now()
                    if now:
                        return
                    retiring = now is False  # e.g. its reply not yet confirmed stored: look again shortly
        finally:
            self.mailbox.stop_timer()
            self.runner.stop_timers()
            self.idle.set()
            self.on_exit(self)

    async def _replay_when_ours(self) -> None:
        """Ownership in doubt: wait until the session is ours again, then queue its staged messages in
        staging order ahead of anything that arrived meanwhile (a message staged after the inbox was
        read stays in its place behind them). The hand-over of a moved partition cancels the wait."""
        assert self.fence is not None
        log.warning("session %s: ownership in doubt; serving nothing of it until it is ours again", self.session_id)
        self.runner.unload()  # restored from the last checkpoint: another process may have written meanwhile
        await self.runner.wait_finished()  # finished messages are marked before the inbox is read
        while True:
            try:
                staged = await self.fence.reestablished(self.session_id)
                break
            except Exception as exc:  # the inbox unreadable: serving anything now could break the order
                log.warning("session %s: reading its staged messages failed (%r); retrying", self.session_id, exc)
                await asyncio.sleep(REPLAY_RETRY_S)
        queued = self.mailbox.take_all()
        for _ in queued:
            self.mailbox.task_done()
        waiting: dict[tuple[str, str], Work] = {i.staged.key: i for i in queued if isinstance(i, Work)}
        for message, inbound in staged:
            work = waiting.pop(message.key, None)
            self.mailbox.put(work if work is not None else Work(message, inbound))
        for item in queued:  # commands keep their place ahead of every message
            if isinstance(item, Command) or item.staged.key in waiting:
                self.mailbox.put(item)
        log.info("session %s: ours again; %d staged messages replayed in order", self.session_id, len(staged))

    async def _serve(self, command: Command) -> None:
        def reply(value: Any) -> None:
            if not command.result.done():
                command.result.set_result(value)

        try:
            value = await command.run(self.runner, reply)
            await self.runner.settle_checkpoints()  # the command's checkpoints are stored before it answers
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if command.result.done():
                log.exception("session %s: command %s failed after replying", self.session_id, command.name)
            else:
                command.result.set_exception(exc)
            return
        reply(value)


# Actors looked at per eviction pass beyond the cap: busy ones are moved to the recent end, so
# a pass costs O(1) however many sessions are loaded.
EVICTION_SCAN = 8


class ActorRegistry:
    """Creates, feeds and evicts session actors; ``join()`` waits until all mailboxes are drained.

    An actor (its runner and the loaded engine session: transcript, snapshot caches) is evicted
    after ``idle_s`` without work, or earlier once more than ``max_loaded`` actors exist: the
    least recently used idle ones go first. An evicted session is restored from its last
    checkpoint on its next item (MQ-2), so an idle session costs its id, not its transcript.
    """

    def __init__(
        self, make_runner: Callable[[str], TurnRunner], idle_s: float, stop_wait_s: float = STOP_WAIT_S,
        max_loaded: int | None = None, retire_retry_s: float = RETIRE_RETRY_S,
        max_with_work: int | None = None, heap_trim: HeapTrim | None = None,
        prefetch: CheckpointPrefetch | None = None,
    ) -> None:
        self._make_runner = make_runner
        self._prefetch = prefetch  # cold sessions' last checkpoints, read while their messages are staged
        self._heap_trim = heap_trim  # told of every session unloaded (the service: glibc's malloc_trim per batch)
        self.admission = WorkAdmission(max_with_work)
        self._idle_s = idle_s
        self.stop_wait_s = stop_wait_s
        self._max_loaded = max_loaded
        self._retire_retry_s = retire_retry_s
        self._actors: dict[str, SessionActor] = {}  # least recently used first
        self._closing = False
        self._holds: dict[str, list[asyncio.Event]] = {}
        self.fence: OwnershipFence | None = None  # partitioned: set once the partitions' owner is built

    def __len__(self) -> int:
        return len(self._actors)

    def queued(self) -> int:
        """Items waiting in all mailboxes (metrics)."""
        return sum(actor.mailbox.qsize() for actor in self._actors.values())

    def get(self, session_id: str) -> SessionActor | None:
        return self._actors.get(session_id)

    def _actor(self, session_id: str) -> SessionActor:
        actor = self._actors.pop(session_id, None)
        if actor is None or actor.task is None or actor.task.done():
            actor = SessionActor(
                session_id, self._make_runner(session_id), self._idle_s, self._forget, held=self._held,
                retire=self._retire, fence=self.fence, retire_retry_s=self._retire_retry_s,
                drained=self._drained,
            )
            self._actors[session_id] = actor
            actor.start()
            self._evict_beyond_cap()
        else:
            self._actors[session_id] = actor  # re-inserted: now the most recently used
        return actor

    def _evict_beyond_cap(self) -> None:
        if self._max_loaded is None:
            return
        for _ in range(min(EVICTION_SCAN, len(self._actors))):
            if len(self._actors) <= self._max_loaded:
                return
            session_id, oldest = next(iter(self._actors.items()))
            del self._actors[session_id]
            if oldest.evictable() and session_id not in self._holds and oldest.task is not None:
                oldest.task.cancel()  # it waits for its mailbox; ``_forget`` finds it gone already
            else:
                self._actors[session_id] = oldest  # in use: keep it, as the most recently used

    def _retire(self, actor: SessionActor) -> bool:
        """After an item: evict idle actors past the cap, least recently used first; True when
        still past it, so ``actor`` (just done, its mailbox empty) ends itself."""
        self._evict_beyond_cap()
        return (
            self._max_loaded is not None and len(self._actors) > self._max_loaded
            and self._actors.get(actor.session_id) is actor and actor.session_id not in self._holds
        )

    def prefetch(self, session_id: str) -> None:
        """The inbound pipeline admitted a message of ``session_id``: if the session has no actor (its
        restore will read the last checkpoint) and is not held, start that read now
        (``consumers/checkpoint_prefetch.py``)."""
        if (
            self._prefetch is not None and not self._closing
            and session_id not in self._actors and session_id not in self._holds
        ):
            self._prefetch.start(session_id)

    async def deliver(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """Put a staged message into its session's mailbox (creating the actor on demand)."""
        if self._closing:
            return  # still staged: replayed from the inbox at the next start
        actor = self._actor(staged.session_id or "")
        if actor.runner.notice_arrival(inbound, busy=actor.busy) is MidTurnAction.REJECT:
            await actor.runner.reject(staged, inbound)
            return
        actor.mailbox.put(Work(staged, inbound))
        self.admission.working(actor.session_id)

    async def deliver_when_room(self, staged: StagedMessage, inbound: InboundMessage) -> None:
        """The inbound pipeline's hand-off: ``deliver`` once the session may take work (``admission``).

        A message for a session without work waits while ``max_with_work`` sessions have some
        (at most ``ADMIT_WAIT_MAX_S``), which holds the stager and so the fetch loop: a backlog
        over many sessions never loads them all at once.
        """
        await self.admission.admit(staged.session_id or "")
        await self.deliver(staged, inbound)

    async def call(self, session_id: str, name: str, run: CommandFn) -> Any:
        """Run ``run`` inside the session's actor (after the item it is handling) and return its reply."""
        if self._closing:
            raise Unavailable("the service is shutting down")
        actor = self._actor(session_id)
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        actor.mailbox.put(Command(name, run, result))
        self.admission.working(session_id)  # counted, never made to wait: a command is not inbound work
        # Shielded: a caller that gives up does not cancel the command half-way.
        return await asyncio.shield(result)

    def request_stop(self, session_id: str, reason: str) -> bool:
        """Cancel the session's running turn now (interrupt); True when its actor was busy."""
        actor = self._actors.get(session_id)
        if actor is None or not actor.busy:
            return False
        actor.runner.request_stop(reason)
        return True

    def _drained(self, actor: SessionActor) -> None:
        if self._actors.get(actor.session_id) is actor:
            self.admission.done(actor.session_id)

    def _forget(self, actor: SessionActor) -> None:
        if self._actors.get(actor.session_id) is actor:
            del self._actors[actor.session_id]
        if actor.session_id not in self._actors and (actor.mailbox.empty() or self._closing):
            self.admission.done(actor.session_id)  # ended holding no work (another actor of it counts for itself)
        # A message may have slipped in between the idle timeout and exit: serve it.
        if not actor.mailbox.empty() and not self._closing:
            fresh = SessionActor(
                actor.session_id, actor.runner, self._idle_s, self._forget, held=self._held, retire=self._retire,
                fence=self.fence, retire_retry_s=self._retire_retry_s, drained=self._drained,
            )
            fresh.mailbox = actor.mailbox
            self._actors[actor.session_id] = fresh
            fresh.start()
        elif not self._closing:
            # Evicted (idle, or past the cap): its transcript and snapshot caches go with it. Unless it is
            # being handed over, or another actor of the session exists already, the runner may keep
            # what makes its next reopen here skip the journal read (consumers/known_tails.py).
            keep = not actor.stopping and actor.session_id not in self._actors
            actor.runner.unload(keep_tail=keep)
            if self._heap_trim is not None:
                self._heap_trim.unloaded()

    @asynccontextmanager
    async def stopped(self, session_id: str) -> AsyncIterator[bool]:
        """SM-21: stop the session's running item, wait for it, and hold the session until the block exits.

        While held, its actor (also one created meanwhile) starts no item; the loaded state
        is forgotten, so the next item reloads. Yields True when nothing of the session is
        running any more; False when the item did not stop within ``stop_wait_s`` or the
        caller is that item itself (it cannot wait for itself): it goes on, and only writes
        of its own, older generation. A session without an actor is just held.
        """
        gate = asyncio.Event()
        self._holds.setdefault(session_id, []).append(gate)
        self._drop_prefetch(session_id)  # its checkpoints may be purged while held
        try:
            yield await self._stop_session(session_id)
        finally:
            self._drop_prefetch(session_id)
            holds = self._holds.get(session_id, [])
            if gate in holds:
                holds.remove(gate)
            if not holds:
                self._holds.pop(session_id, None)
            gate.set()

    def _drop_prefetch(self, session_id: str) -> None:
        if self._prefetch is not None:
            self._prefetch.discard(session_id)

    async def _stop_session(self, session_id: str) -> bool:
        actor = self._actors.get(session_id)
        if actor is None:
            return True
        await actor.runner.stop_running_turn()
        if actor.task is asyncio.current_task():  # deleted from its own item: waiting would deadlock
            actor.runner.unload_before_next_item()
            return False
        if not await actor.wait_idle(self.stop_wait_s):
            log.warning("session %s: its running item did not stop within %.1f s; clearing anyway",
                        session_id, self.stop_wait_s)
            actor.runner.unload_before_next_item()
            return False
        actor.runner.unload()
        return True

    async def stop_session(self, session_id: str) -> bool:
        """Stop the session's running item and forget its loaded state (no hold); see ``stopped``."""
        async with self.stopped(session_id) as stopped:
            return stopped

    async def _held(self, session_id: str) -> None:
        while holds := self._holds.get(session_id):
            await holds[-1].wait()

    async def release_sessions(self, owned_elsewhere: Callable[[str], bool]) -> int:
        """Stop the actors of sessions another process owns now (a lost or handed-over partition).

        Their running items are cancelled and awaited at once and their queued work dropped: all
        of it stays staged and the new owner replays it; queued commands are refused with
        ``unavailable``. Returns how many actors were stopped.
        """
        actors = [a for sid, a in list(self._actors.items()) if owned_elsewhere(sid)]
        for a in actors:
            a.stopping = True
            for item in a.mailbox.take_all():
                if isinstance(item, Command) and not item.result.done():
                    item.result.set_exception(Unavailable("this session moved to another process"))
                a.mailbox.task_done()
        # Cancelled, and again while running on: a turn that lost its cancel (task_stop.py) would serve on.
        await asyncio.gather(*(cancel_and_wait(a.task) for a in actors if a.task is not None))
        for a in actors:
            if self._actors.get(a.session_id) is a:
                del self._actors[a.session_id]
            try:
                await a.runner.release()
            except Exception as exc:
                log.warning("session %s: releasing after the hand-over failed: %r", a.session_id, exc)
        return len(actors)

    async def join(self, timeout_s: float | None = None) -> None:
        """Wait until every mailbox is drained (tests and graceful shutdown)."""

        async def _all() -> None:
            while True:
                actors = list(self._actors.values())
                if not actors:
                    return
                await asyncio.gather(*(a.mailbox.join() for a in actors))
                await asyncio.gather(*(a.runner.wait_finished() for a in actors))
                if all(a.mailbox.empty() and not a.busy for a in self._actors.values()):
                    return

        await asyncio.wait_for(_all(), timeout_s)

    async def close(self, drain_timeout_s: float = 10.0) -> None:
        """Stop taking work, let running turns finish within the timeout, then cancel the rest.

        Work still in a mailbox stays staged in the inbox and is replayed at the next start;
        queued commands are refused with ``unavailable``.
        """
        self._closing = True
        self.admission.clear()
        actors = list(self._actors.values())
        for a in actors:
            a.stopping = True
            for item in a.mailbox.take_all():
                if isinstance(item, Command) and not item.result.done():
                    item.result.set_exception(Unavailable("the service is shutting down"))
                a.mailbox.task_done()
        idle = [a.task for a in actors if a.task is not None and not a.busy]
        busy = [a.task for a in actors if a.task is not None and a.busy]
        for t in idle:
            t.cancel()
        if busy:
            pending = await _drain(busy, drain_timeout_s)
            if pending:
                log.warning("drain timeout: %d turns cancelled; they stay staged for the next owner", len(pending))
        # The turns still running cancelled, and every task again while it runs on: a turn that lost its
        # cancel (task_stop.py) would hold up the stop.
        await asyncio.gather(*(cancel_and_wait(t) for t in (*idle, *busy)))
        for a in actors:
            await a.runner.release()
        self._actors.clear()


DRAIN_LOG_EVERY_S = 1.0


async def _drain(busy: list[asyncio.Task[None]], timeout_s: float) -> set[asyncio.Task[None]]:
    """Wait up to ``timeout_s`` for the running turns, logging progress; returns those still running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pending: set[asyncio.Task[None]] = set(busy)
    log.info("draining: %d turns running, up to %.1f s", len(pending), timeout_s)
    while pending:
        left = deadline - loop.time()
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(left, DRAIN_LOG_EVERY_S))
        if pending:
            log.info("draining: %d turns still running, %.1f s left", len(pending), max(deadline - loop.time(), 0))
    if not pending:
        log.info("drained: every running turn finished")
    return pending

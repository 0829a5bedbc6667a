"""The session: accepted state folded from its journal, and every lifecycle operation.

Every mutation is journaled first (``HistoryJournal.append`` returns once durable),
then folded into the state by ``core.engine.reducer``; a ``checkpoint`` callback,
when given, then receives the complete snapshot. The provider loop lives in
``core.engine.turn_loop``, context recovery in ``core.engine.recovery``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from core.engine import completion, group_context, openings
from core.engine.attachments import attachment_drafts
from core.engine.chatend import forget_memo
from core.engine.drafts import Checkpoint, Draft, interrupted_result
from core.engine.journal import EntryKind, HistoryJournal, JournalEntry
from core.engine.knowledge import KnowledgeStore
from core.engine.objects import ResolvedObject, object_bytes_from_journal, transport_kind_for
from core.engine.options import RuntimeModel, SessionOptions, WorkBinding
from core.engine.ports import Clock, HistoryReader, PartialText, TakePolicy, iso, utc_now
from core.engine.recovery import recover_context
from core.engine.reducer import apply
from core.engine.session_view import SessionView
from core.engine.snapshot import EventsJson, encode_snapshot, state_from_snapshot
from core.engine.state import KnowledgePlan, SessionState
from core.engine.tools import ToolRegistry
from core.engine.tools.leases import FileLeases
from core.engine.turn_loop import run_turn
from core.errors import Cancelled, CheckpointFailed, Conflict, InvalidInput, NotFound
from core.providers.base import Provider, Usage
from core.trusted_models import trusted

T = TypeVar("T")
MAX_REMEMBERED_CANCELS = 64


class Session(SessionView):
    """One logical session (KS-1..KS-21). Build it with ``await Session.open(...)``."""

    def __init__(
        self,
        *,
        state: SessionState,
        system_prompt: str,
        journal: HistoryJournal,
        provider: Provider,
        tools: ToolRegistry,
        knowledge: KnowledgeStore,
        take_policy: TakePolicy,
        history_reader: HistoryReader | None,
        leases: FileLeases,
        clock: Clock,
    ) -> None:
        self._state = state
        self.system_prompt = system_prompt
        self.journal = journal
        self.provider = provider
        self.tools = tools
        self.knowledge = knowledge
        self.take_policy = take_policy
        self.history_reader = history_reader
        self.leases = leases
        self.clock = clock
        self.last_usage = Usage()
        # The largest snapshot the checkpoint callback can take (None: no bound but the window): a
        # conversation that would pass it is compacted like one over its window (``recovery.py``).
        self.snapshot_max_bytes: int | None = None
        # Bytes of the last snapshot handed out besides the conversation's (its state, events, boxes).
        self.snapshot_rest_bytes = 0
        # Partial text of streamed model answers goes here (the shell sets it per turn).
        self.partial_text: PartialText | None = None
        self._object_bytes: dict[str, bytes] = {}
        self._running_op: str | None = None
        self._inflight: asyncio.Future[Any] | None = None
        self._cancel_requested = False
        self._cancelled_ops: set[str] = set()
        # State version of the last snapshot handed to a checkpoint callback (its "new" entries start here).
        self._published_version = state.next_seq
        self._events_json = EventsJson()  # the snapshot's events, encoded once each
        # Every external event the journal holds entries of (KS-14; a superset is fine: a member is looked
        # up), read when needed a second time since the load (the first unknown event is looked up by itself).
        self._known_events: set[str] | None = None
        self._looked_up_one = False

    # ------------------------------------------------------------------ construction
    @classmethod
    async def open(
        cls,
        *,
        session_id: str,
        system_prompt: str,
        runtime: RuntimeModel,
        options: SessionOptions,
        journal: HistoryJournal,
        provider: Provider,
        tools: ToolRegistry,
        knowledge: KnowledgeStore,
        take_policy: TakePolicy,
        leases: FileLeases,
        restored: dict[str, Any] | None = None,
        clock: Clock = utc_now,
        history_reader: HistoryReader | None = None,
        journal_empty: bool = False,
        snapshot_max_bytes: int | None = None,
    ) -> Session:
        """Create or reopen a session (KS-2).

        Without ``restored`` the state is folded from the whole journal (empty for a
        new session). With ``restored`` (a snapshot) its accepted state wins over
        ``options``; journal entries newer than the snapshot are folded on top, so a
        crash between a journal write and its checkpoint loses nothing. ``runtime``
        and ``system_prompt`` always come from the caller. An ingress session stages
        its source history on first open. The collaborators (``tools``, ``knowledge``,
        ``take_policy``, ``leases``) have no defaults: the caller passes what it uses. ``journal_empty``: the caller knows the session
        was created a moment ago with no history, so the journal is not read. Only the entries the
        state does not cover are read (``seq >= next_seq``: a range of the stored journal's key).
        ``snapshot_max_bytes``: the largest snapshot the checkpoint callback can store; a
        conversation that would pass it is compacted even inside its window (``recovery.py``).
        """
        if not session_id:
            raise InvalidInput("session_id must not be empty")
        if not system_prompt:
            raise InvalidInput("system_prompt must not be empty (it arrives complete)")
        prompt_sha = hashlib.sha256(system_prompt.encode("utf-8")).hexdigest()
        if restored is not None:
            state = state_from_snapshot(restored)
            if state.session_id != session_id:
                raise InvalidInput(f"snapshot belongs to {state.session_id!r}, not {session_id!r}")
            state.runtime = runtime
            state.system_prompt_sha256 = prompt_sha
        else:
            state = _fresh_state(session_id, prompt_sha, runtime, options, iso(clock()))
        for entry in [] if journal_empty else await journal.load(session_id, from_seq=state.next_seq):
            if entry.seq < state.next_seq:
                continue
            if entry.seq != state.next_seq:
                raise Conflict(f"journal of {session_id!r} has a gap before seq {entry.seq}")
            apply(state, entry)
        session = cls(
            state=state,
            system_prompt=system_prompt,
            journal=journal,
            provider=provider,
            tools=tools,
            knowledge=knowledge,
            take_policy=take_policy,
            history_reader=history_reader,
            leases=leases,
            clock=clock,
        )
        session.snapshot_max_bytes = snapshot_max_bytes
        if state.mode.kind == "ingress" and not state.openings.get("ingress"):
            await openings.stage_ingress_opening(session)
        return session

    # ------------------------------------------------------------------ journal plumbing
    def new_id(self, prefix: str) -> str:
        """A fresh unique id with a readable prefix."""
        return f"{prefix}_{uuid.uuid4().hex[:20]}"

    def draft(self, kind: EntryKind | str, payload: dict[str, Any], *, in_turn: bool = True) -> Draft:
        """An entry tied to the current turn (when ``in_turn`` and a turn is pending)."""
        turn = self._state.turn
        if in_turn and turn.pending:
            return Draft(EntryKind(kind), payload, turn.turn_id, turn.external_event_id)
        return Draft(EntryKind(kind), payload)

    async def commit(self, drafts: list[Draft], checkpoint: Checkpoint | None = None) -> list[JournalEntry]:
        """Journal ``drafts`` atomically, fold them, then checkpoint (KS-10 transition)."""
        at = iso(self.clock())
        if self._state.next_seq == 0:
            # The first entry pins what a fresh open generated, so a journal-only reopen is equal.
            created = {
                "type": "created",
                "started_at": self._state.started_at,
                "write_session_id": self._state.knowledge_plan.write_session_id,
            }
            drafts = [Draft(EntryKind.EVENT, created), *drafts]
        # Built, not validated: a draft's kind is an EntryKind, its payload the dict its maker built
        # (the journal encodes it and the transcript shares it; neither is changed after this).
        first = self._state.next_seq
        entries = [
            trusted(JournalEntry, {
                "seq": first + i, "kind": d.kind, "turn_id": d.turn_id, "external_event_id": d.external_event_id,
                "at": at, "payload": d.payload,
            })
            for i, d in enumerate(drafts)
        ]
        await self.journal.append(self._state.session_id, entries)
        for entry in entries:
            if entry.kind == EntryKind.OBJECT and "data_b64" in entry.payload:
                self._object_bytes[entry.payload["object_id"]] = base64.b64decode(entry.payload["data_b64"])
            apply(self._state, entry)
            if self._known_events is not None and entry.external_event_id:
                self._known_events.add(entry.external_event_id)
        await self.publish(checkpoint)
        return entries

    async def publish(self, checkpoint: Checkpoint | None) -> None:
        """Hand the snapshot to ``checkpoint``; any failure aborts the caller (CheckpointFailed)."""
        if checkpoint is None:
            return
        try:
            snapshot = encode_snapshot(self._state, self.system_prompt, self._published_version, self._events_json)
            self._published_version = snapshot.state_version
            self.snapshot_rest_bytes = len(snapshot.raw) - snapshot.conversation_bytes
            await checkpoint(snapshot)
        except CheckpointFailed:
            raise
        except Exception as exc:
            raise CheckpointFailed(f"checkpoint callback failed: {exc!r}") from exc

    async def guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a provider call or tool dispatch so ``cancel(operation_id)`` can stop it."""
        if self._cancel_requested:
            coro.close()
            self.raise_if_cancelled()
        task = asyncio.ensure_future(coro)
        self._inflight = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._cancel_requested and (current is None or current.cancelling() == 0):
                raise Cancelled(f"operation {self._running_op} was cancelled") from None
            raise
        finally:
            self._inflight = None

    def raise_if_cancelled(self) -> None:
        """Raise Cancelled when the running operation was cancelled."""
        if self._cancel_requested:
            raise Cancelled(f"operation {self._running_op} was cancelled")

    # ------------------------------------------------------------------ turn lifecycle
    async def begin_user_turn(
        self, text: str, metadata: dict[str, Any] | None = None, *, checkpoint: Checkpoint | None = None
    ) -> bool:
        """Open a turn with a user message (KS-4); False when a turn is pending, the input is
        empty, the session is completed or ``metadata.inbound_id`` was already staged."""
        meta = metadata or {}
        attachments = meta.get("attachments") or []
        state = self._state
        if state.turn.pending or state.completed or (not text.strip() and not attachments):
            return False
        inbound_id = meta.get("inbound_id")
        if inbound_id and inbound_id in state.recent_inbound_ids:
            return False
        turn_id = self.new_id("turn")
        event_id = meta.get("external_event_id")
        objects, listed = attachment_drafts(attachments, self.new_id)
        user = {"text": text, "attachments": listed, "agent_owned": False}
        if inbound_id:
            user["inbound_id"] = inbound_id
        if meta.get("from_elsewhere"):
            user["from_elsewhere"] = True  # SM-11: relayed from another platform than the room's
        drafts = [
            Draft(EntryKind.EVENT, {"type": "turn_started", "principal": meta.get("principal")}, turn_id, event_id),
            *[Draft(EntryKind.OBJECT, o, turn_id, event_id) for o in objects],
            Draft(EntryKind.USER_MESSAGE, user, turn_id, event_id),
        ]
        await self.commit(drafts, checkpoint)
        return True

    async def append_final_user_message(
        self, text: str, metadata: dict[str, Any] | None = None, *, checkpoint: Checkpoint | None = None
    ) -> bool:
        """Stage the source's last message without opening a turn; the source is then
        terminated (KS-5, KS-16). False for empty text or an already terminated source."""
        if not text.strip() or self._state.source_terminated:
            return False
        meta = metadata or {}
        payload = {"text": text, "attachments": [], "agent_owned": False, "final": True}
        if meta.get("inbound_id"):
            payload["inbound_id"] = meta["inbound_id"]
        user = self.draft(EntryKind.USER_MESSAGE, payload)
        if meta.get("external_event_id"):
            user.external_event_id = meta["external_event_id"]
        await self.commit([user, self.draft(EntryKind.EVENT, {"type": "source_terminated"})], checkpoint)
        return True

    async def stage_source_message(
        self, agent_owned: bool, text: str, metadata: dict[str, Any] | None = None, *,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        """Stage an explicitly user- or agent-owned source message, then run context recovery (KS-6)."""
        if not text.strip():
            raise InvalidInput("source message text must not be empty")
        if self._state.completed:
            raise Conflict("the session is completed")
        meta = metadata or {}
        payload = {"text": text, "attachments": [], "agent_owned": bool(agent_owned), "source": True}
        if meta.get("inbound_id"):
            payload["inbound_id"] = meta["inbound_id"]
        await self.commit([self.draft(EntryKind.USER_MESSAGE, payload)], checkpoint)
        await recover_context(self, checkpoint)

    async def stage_free_time_opening(self, *, checkpoint: Checkpoint | None = None) -> bool:
        """Create the free-time opening and its turn exactly once (KS-7)."""
        return await openings.stage_free_time_opening(self, checkpoint)

    async def stage_wakeup_opening(self, *, checkpoint: Checkpoint | None = None) -> bool:
        """Create the wakeup opening exactly once; needs an RFC 3339 ``wakeup_marker`` (KS-7)."""
        return await openings.stage_wakeup_opening(self, checkpoint)

    async def interrupt_current_turn(self, *, checkpoint: Checkpoint | None = None) -> bool:
        """Repair open tool calls with interrupted results, add a user-stop notice, clear the
        turn, orchestration back to idle (KS-8). False when nothing was pending."""
        state = self._state
        if self._running_op is not None:
            raise Conflict("a run is in progress: cancel its operation id and await it first")
        if not state.turn.pending and not state.turn.open_calls:
            return False
        drafts = [
            self.draft(EntryKind.TOOL_RESULT, interrupted_result(call.id, call.name, "stopped by the user"))
            for call in state.turn.open_calls
        ]
        drafts.append(self.draft(EntryKind.NOTICE, {"code": "user_stop", "text": "The user stopped this turn."}))
        drafts.append(self.draft(EntryKind.EVENT, {"type": "interrupted"}))
        await self.commit(drafts, checkpoint)
        return True

    async def reset_exhausted_turn_rounds_for_retry(self, *, checkpoint: Checkpoint | None = None) -> bool:
        """Reset the round count of an exhausted ordinary conversation only (KS-9)."""
        state = self._state
        if not (state.mode.is_conversation and state.turn.pending and state.exhausted):
            return False
        await self.commit([self.draft(EntryKind.EVENT, {"type": "rounds_reset"})], checkpoint)
        return True

    async def run_pending_turn(self, operation_id: str, checkpoint: Checkpoint) -> str | None:
        """Run the provider loop of the pending turn (KS-10); see ``core.engine.turn_loop``."""
        if not self._state.turn.pending:
            return None
        if self._running_op is not None:
            raise Conflict(f"operation {self._running_op} is already running")
        self._running_op = operation_id
        self._cancel_requested = operation_id in self._cancelled_ops
        self._cancelled_ops.discard(operation_id)
        self.last_usage = Usage()
        try:
            return await run_turn(self, checkpoint)
        finally:
            self._running_op = None
            self._inflight = None
            self._cancel_requested = False

    def forget_caches(self) -> None:
        """The session is being unloaded: drop the memoised encodings of its transcript."""
        forget_memo(self._state.transcript)

    def bind_work(self, work: WorkBinding | None) -> None:
        """Use ``work`` as the directories file tools may touch from now on (SM-5/6/35).

        The binding is owned by the session records, not by the journal: the caller passes
        the current one before each turn, so a new worktree or ``current_dir`` applies at
        the next turn also to a session restored from an older checkpoint.
        """
        self._state.work = work

    def cancel(self, operation_id: str) -> bool:
        """Cancel the operation's provider call / tool dispatch (KS-10). True if it was running;
        an id not yet running is remembered and cancels that run when it starts."""
        if self._running_op != operation_id:
            if len(self._cancelled_ops) >= MAX_REMEMBERED_CANCELS:
                self._cancelled_ops.pop()
            self._cancelled_ops.add(operation_id)
            return False
        self._cancel_requested = True
        if self._inflight is not None:
            self._inflight.cancel()
        return True

    # ------------------------------------------------------------------ completion
    async def finalize_free_time(
        self, reason: str, result: str = "", *, checkpoint: Checkpoint | None = None
    ) -> None:
        """Record the free-time slice result and clear the turn (KS-17)."""
        await completion.finalize_free_time(self, reason, result, checkpoint)

    async def commit_current_write_session(self, *, checkpoint: Checkpoint | None = None) -> None:
        """Atomically commit staged knowledge writes and complete the session (KS-18)."""
        await completion.commit_write_session(self, checkpoint)

    async def release_managed_sources(self) -> int:
        """Release the session-scoped leases of managed development tools (KS-19)."""
        return await self.leases.release_all(self._state.managed_source_session_id)

    # ------------------------------------------------------------------ queries
    async def resolve_object(self, object_id: str) -> ResolvedObject:
        """Exact bytes and delivery facts of a pending history object or a canonical
        knowledge object (KS-11); resolving stages nothing."""
        meta = self._state.objects.get(object_id)
        if meta is not None:
            data = self._object_bytes.get(object_id)
            if data is None:
                data = await object_bytes_from_journal(self.journal, self.session_id, object_id, meta["seq"])
                self._object_bytes[object_id] = data
            return ResolvedObject(object_id, data, meta["file_name"], meta["media_type"], meta.get("transport_kind"))
        canonical = await self.knowledge.get_object(object_id)
        if canonical is None:
            raise NotFound(f"no object {object_id!r} in this session or the knowledge store")
        return ResolvedObject(
            object_id, canonical.data, canonical.file_name, canonical.media_type,
            transport_kind_for(canonical.media_type),
        )

    async def refresh_group_context(
        self, context: dict[str, Any], current_message_id: str | None = None, *,
        checkpoint: Checkpoint | None = None,
    ) -> bool:
        """In a group session replace the channel context, add one controller update box and
        run context recovery; elsewhere a no-op returning False (KS-15)."""
        return await group_context.refresh_group_context(self, context, current_message_id, checkpoint)


def _fresh_state(
    session_id: str, prompt_sha: str, runtime: RuntimeModel, options: SessionOptions, started_at: str
) -> SessionState:
    return SessionState(
        session_id=session_id,
        session_type=options.session_type,
        system_prompt_sha256=prompt_sha,
        runtime=runtime,
        mode=options.mode,
        channel=dict(options.channel),
        free_time=dict(options.free_time),
        orchestration={**options.orchestration, "state": "idle"},
        group_context=dict(options.group_context),
        provenance_id=options.provenance_id,
        source_session_type=options.source_session_type,
        managed_source_session_id=options.managed_source_session_id or session_id,
        root_node_ids=list(options.root_node_ids),
        reference_root_node_ids=list(options.reference_root_node_ids),
        work=options.work,
        max_rounds=options.max_rounds,
        started_at=started_at,
        knowledge_plan=KnowledgePlan(write_session_id=f"ws_{session_id}_{uuid.uuid4().hex[:12]}"),
    )


__all__ = ["Session"]

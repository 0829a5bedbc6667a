"""The durable session history journal: entry model, port, and an in-memory twin.

Every semantic change of a session is one or more journal entries; the session
state is a fold over them (``core.engine.reducer``). Entries are numbered per
session by ``seq`` (0, 1, 2, …); a journal refuses a ``seq`` it already holds
with ``core.errors.Conflict`` so two writers of one session cannot interleave.

A stored journal keeps each generation of a session id apart (SM-22): ``append`` and
``load`` take the generation (0 by default), so a write of a deleted generation that
lands late is never read by the next one. ``JournalOfGeneration`` is the plain port an
engine ``Session`` writes through, bound to the generation it was opened for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class EntryKind(StrEnum):
    """What a journal entry records."""

    USER_MESSAGE = "user_message"
    AGENT_MESSAGE = "agent_message"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    NOTICE = "notice"
    OBJECT = "object"
    REPLY = "reply"
    SUMMARY = "summary"
    BOX = "box"
    EVENT = "event"


class JournalEntry(BaseModel):
    """One durable fact of a session's history.

    ``payload`` depends on ``kind`` (see ``core.engine.reducer`` for each shape);
    ``turn_id`` and ``external_event_id`` tie it to the turn and inbound event.
    """

    model_config = ConfigDict(frozen=True)

    seq: int = Field(ge=0)
    kind: EntryKind
    turn_id: str | None = None
    external_event_id: str | None = None
    at: str
    payload: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class HistoryJournal(Protocol):
    """Port: a per-session append-only journal. ``append`` returns once durable."""

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        """Durably append ``entries`` (consecutive seqs) atomically; Conflict on a taken seq."""
        ...

    async def load(self, session_id: str, *, from_seq: int = 0) -> list[JournalEntry]:
        """Every entry of the session with ``seq >= from_seq`` in ``seq`` order (empty for an unknown session)."""
        ...

    async def clear(self, session_id: str) -> None:
        """Remove the session's whole history."""
        ...

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind]
    ) -> list[JournalEntry]:
        """The entries of ``kinds`` tied to ``external_event_id`` in ``seq`` order (KS-14 lookups)."""
        ...

    async def event_ids(self, session_id: str) -> set[str]:
        """At least every external event id the session's entries are tied to, of any kind (a store may
        include ids of older generations it has not cleared yet): a member is checked with
        ``entries_for_event``, a non-member has no entries."""
        ...


class GenerationalJournal(Protocol):
    """Port of a stored journal: each generation of a session id is a history of its own."""

    async def append(self, session_id: str, entries: list[JournalEntry], *, generation: int = 0) -> None:
        """Durably append to ``generation``'s history; Conflict on a taken seq."""
        ...

    async def load(self, session_id: str, *, generation: int = 0, from_seq: int = 0) -> list[JournalEntry]:
        """Every entry of ``generation`` with ``seq >= from_seq`` in ``seq`` order."""
        ...

    async def clear(self, session_id: str, *, before_generation: int | None = None) -> None:
        """Remove generations older than ``before_generation`` (None: every generation)."""
        ...

    async def clear_older(self, generations: Sequence[tuple[str, int]]) -> None:
        """Per ``(session_id, generation)``: remove that session's older generations (one write)."""
        ...

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind], *, generation: int = 0
    ) -> list[JournalEntry]:
        """``generation``'s entries of ``kinds`` tied to ``external_event_id``, in ``seq`` order."""
        ...

    async def event_ids(self, session_id: str, *, generation: int = 0) -> set[str]:
        """At least every external event id ``generation``'s entries are tied to (``HistoryJournal.event_ids``)."""
        ...


class JournalReadAhead(Protocol):
    """The newest entries of one generation, read before the reader knew where its tail starts (a
    reopen reads them while it fetches the checkpoint that says so)."""

    def entries_from(self, from_seq: int) -> list[JournalEntry] | None:
        """The entries with ``seq >= from_seq`` in ``seq`` order, as ``load`` would read them, when
        the rows read cover that range; None when they may not (read the range itself)."""
        ...


class JournalOfGeneration:
    """``HistoryJournal`` over one generation of each id: ``generation_of(session_id)`` picks it.

    An engine ``Session`` gets one bound to the generation it was opened for, so what it
    writes after its id was deleted stays in the old generation. ``read_ahead``: the newest
    entries, read while the session's checkpoint was fetched; the first ``load`` takes its
    range from them when they cover it (once: later loads read the journal).

    It also keeps what a reopen may rely on: ``exact`` stays True while every append through it
    returned (durable and folded by its caller) and none is under way. An append that raised or
    was cancelled may still have committed (a cancelled caller's write still runs in the group
    commit; a lost ``COMMIT`` answer), so it ends ``exact`` for good and calls ``on_unsure``.
    """

    def __init__(
        self, journal: GenerationalJournal, generation_of: Callable[[str], int],
        read_ahead: Awaitable[JournalReadAhead] | None = None,
        on_unsure: Callable[[str], None] | None = None,
    ) -> None:
        self._journal = journal
        self._generation_of = generation_of
        self._read_ahead = read_ahead
        self._on_unsure = on_unsure
        self._appending = 0
        self._unsure = False

    @property
    def exact(self) -> bool:
        """True when the journal holds exactly what the appends through this object returned from."""
        return not self._unsure and self._appending == 0

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        self._appending += 1
        try:
            await self._journal.append(session_id, entries, generation=self._generation_of(session_id))
        except BaseException:
            self._unsure = True
            if self._on_unsure is not None:
                self._on_unsure(session_id)
            raise
        finally:
            self._appending -= 1

    async def load(self, session_id: str, *, from_seq: int = 0) -> list[JournalEntry]:
        ahead, self._read_ahead = self._read_ahead, None
        if ahead is not None:
            try:
                entries = (await ahead).entries_from(from_seq)
            except Exception:  # the read ahead failed: the range read below answers (or fails) for itself
                entries = None
            if entries is not None:
                return entries
        return await self._journal.load(session_id, generation=self._generation_of(session_id), from_seq=from_seq)

    async def clear(self, session_id: str) -> None:
        """Remove this generation and every older one."""
        await self._journal.clear(session_id, before_generation=self._generation_of(session_id) + 1)

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind]
    ) -> list[JournalEntry]:
        return await self._journal.entries_for_event(
            session_id, external_event_id, kinds, generation=self._generation_of(session_id)
        )

    async def event_ids(self, session_id: str) -> set[str]:
        return await self._journal.event_ids(session_id, generation=self._generation_of(session_id))



"""The versioned snapshot (KS-20): accepted state plus exact derived projections.

The snapshot is complete: ``Session.open(restored=snapshot)`` rebuilds an equal
session. ``state_version`` is the number of journal entries folded into it, so it
only grows and tells two checkpoints of one session apart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, TypeVar

import orjson
from pydantic import Field
from pydantic_core import to_jsonable_python

from core.engine.chatend import memo_chatend_parts, memo_for, project_messages, transcript_chatend_text
from core.engine.state import EventRecord, SessionState, TranscriptItem
from core.errors import InvalidInput

FORMAT_VERSION: Final = 1
SeqT = TypeVar("SeqT", TranscriptItem, EventRecord)

Status = Literal["idle", "pending", "exhausted", "completed"]


class Snapshot(SessionState):
    """A complete, versioned session checkpoint; JSON Schema via ``Snapshot.model_json_schema()``."""

    format_version: Literal[1] = FORMAT_VERSION
    state_version: int = 0
    status: Status = "idle"
    projection: list[dict[str, Any]] = Field(default_factory=list)
    chatend_text: str = ""


def status_of(state: SessionState) -> Status:
    """Derive the coarse status from accepted state."""
    if state.completed:
        return "completed"
    if state.turn.pending:
        return "exhausted" if state.exhausted else "pending"
    return "idle"


def build_snapshot(state: SessionState, system_prompt: str) -> dict[str, Any]:
    """Snapshot ``state`` as a JSON-ready dict with exactly the fields of ``Snapshot``.

    Built on the hot path of every checkpoint, so the transcript (already JSON-ready
    dicts, often most of the bytes) is copied by reference instead of being walked by
    the serializer again; ``test_snapshot`` proves the result equals the validated model's.
    """
    projection = project_messages(state.transcript)
    data = state.model_dump(mode="json", exclude={"transcript"})
    data["transcript"] = list(state.transcript)
    data["format_version"] = FORMAT_VERSION
    data["state_version"] = state.next_seq
    data["status"] = status_of(state)
    data["projection"] = projection
    data["chatend_text"] = transcript_chatend_text(system_prompt, state.transcript)
    return {name: data[name] for name in Snapshot.model_fields}


class EncodedSnapshot(Mapping[str, Any]):
    """A snapshot as its exact JSON bytes (``raw``), what checkpoint callbacks receive.

    Reading it as a mapping parses ``raw`` once (the equal ``build_snapshot`` dict);
    a publisher sends ``raw`` as is. ``new_items`` / ``new_events`` are the transcript
    items and events journaled since the previous snapshot the session handed out.
    ``conversation_bytes``: how much of ``raw`` the transcript, its projection and the chatend
    text take (the rest is the state, events and boxes).
    """

    __slots__ = ("_data", "conversation_bytes", "new_events", "new_items", "raw", "state_version")

    def __init__(
        self, raw: bytes, state_version: int, new_items: list[TranscriptItem], new_events: list[EventRecord],
        conversation_bytes: int = 0,
    ) -> None:
        self.raw = raw
        self.conversation_bytes = conversation_bytes
        self.state_version = state_version
        self.new_items = new_items
        self.new_events = new_events
        self._data: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = orjson.loads(self.raw)
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def _tail_since(entries: list[SeqT], since_version: int) -> list[SeqT]:
    """The entries with ``seq >= since_version``: a scan from the end. They are in seq order but
    for a context-recovery summary, which replaces the oldest items at the head of the transcript
    with the newest seq, so a new head is taken too."""
    start = len(entries)
    while start > 0 and entries[start - 1]["seq"] >= since_version:
        start -= 1
    tail = entries[start:]
    if start > 0 and entries[0]["seq"] >= since_version:
        tail.insert(0, entries[0])
    return tail


# The last fields of ``SessionState`` (in its order, so the bytes stay those of a checkpoint
# written before; ``test_snapshot`` checks the order): side collections the reducer keeps as
# plain JSON-ready dicts and strings, like the transcript items, and the usage total. orjson
# encodes them in a fraction of what pydantic's typed serializer takes to walk their TypedDict
# schemas, and they are most of the state outside the transcript. A model among them goes
# through ``to_jsonable_python`` (what ``model_dump(mode="json")`` gives). ``events`` (up to
# ``MAX_EVENTS`` records, the largest of them) is spliced from ``EventsJson``.
ORJSON_TAIL_FIELDS: Final = ("boxes", "events", "objects", "external_responses", "recent_inbound_ids", "usage_total")
NOT_IN_REST: Final[set[str]] = {"transcript", *ORJSON_TAIL_FIELDS}
AFTER_EVENTS: Final = ORJSON_TAIL_FIELDS[2:]
# The state's typed serializer, called as is: ``model_dump_json`` wraps the same call in a
# Python layer of argument handling that took longer than the encoding of the rest itself.
_STATE_JSON = SessionState.__pydantic_serializer__.to_json
_FORMAT_VERSION_JSON: Final = str(FORMAT_VERSION).encode()


class EventsJson:
    """The comma-joined JSON of a session's ``events``, kept per record while the list changes
    the way the reducer changes it: records appended at its end, the oldest cut at its head
    (``MAX_EVENTS``). A record is a fresh dict never edited afterwards, so identity marks the
    records already encoded; a list changed otherwise (another list, a restore) is encoded anew."""

    __slots__ = ("parts", "records")

    def __init__(self) -> None:
        self.records: deque[EventRecord] = deque()
        self.parts: deque[bytes] = deque()

    def json(self, events: list[EventRecord]) -> bytes:
        records, parts = self.records, self.parts
        if events:
            first = events[0]
            while records and records[0] is not first:  # cut at the head since the last snapshot
                records.popleft()
                parts.popleft()
        known = len(records)
        if known and (known > len(events) or events[known - 1] is not records[-1]):
            records.clear()
            parts.clear()
            known = 0
        for record in events[known:]:
            records.append(record)
            # Copied at its length: ``orjson.dumps`` hands back its whole write buffer (4 KB for a
            # 200-byte record), and these stay as long as the session is loaded (3 per turn).
            parts.append(bytes(memoryview(orjson.dumps(record, default=to_jsonable_python))))
        return b",".join(parts)


def encode_snapshot(
    state: SessionState, system_prompt: str, since_version: int = 0, events_json: EventsJson | None = None
) -> EncodedSnapshot:
    """The ``build_snapshot`` value as JSON bytes, spliced from memoised per-item encodings.

    A checkpoint is complete (KS-20), so it repeats the whole transcript, its projection
    and the chatend text; encoding them again at every durable step would make each step
    cost O(conversation). Transcript items are never edited in place, so their JSON (and
    their projected messages' JSON) is encoded once and kept joined, and the chatend text
    kept JSON-escaped (``TranscriptMemo``): a snapshot copies each once; only the small rest of the state is
    serialised per snapshot (its JSON-ready tail by orjson, ``ORJSON_TAIL_FIELDS``; the events
    from ``events_json``, the session's, when given). ``test_snapshot`` proves the bytes are
    those of the plain encoding and parse to ``build_snapshot``.
    """
    memo = memo_for(state.transcript)
    rest = _STATE_JSON(state, exclude=NOT_IN_REST)
    events = (events_json or EventsJson()).json(state.events)
    raw = b"".join((
        rest[:-1],
        b',"boxes":', orjson.dumps(state.boxes, default=to_jsonable_python),
        b',"events":[', events,
        b"],", orjson.dumps({name: getattr(state, name) for name in AFTER_EVENTS}, default=to_jsonable_python)[1:-1],
        b',"transcript":[', memo.transcript_json,
        b'],"format_version":', _FORMAT_VERSION_JSON,
        b',"state_version":', str(state.next_seq).encode(),
        b',"status":"', status_of(state).encode(),
        b'","projection":[', memo.projection_json,
        b'],"chatend_text":', *memo_chatend_parts(system_prompt, memo),
        b"}",
    ))
    return EncodedSnapshot(
        raw, state.next_seq, _tail_since(state.transcript, since_version), _tail_since(state.events, since_version),
        memo.conversation_bytes,
    )


_STATE_FIELDS: Final = tuple(SessionState.model_fields)


def state_from_snapshot(data: dict[str, Any]) -> SessionState:
    """Validate a snapshot and return its accepted state; refuse unknown format versions."""
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InvalidInput(f"unsupported snapshot format_version {version!r} (expected {FORMAT_VERSION})")
    # The accepted state alone is validated, once: the projection, the chatend text and the status are
    # derived from it and built again by the restored session, so they are not read (validating the
    # whole Snapshot, then copying its fields into a SessionState, took 66 against 46 us for a 2-turn
    # session and 2.1–2.3 against 1.9–2.0 ms for a 300-turn one, the parse included).
    return SessionState.model_validate({name: data[name] for name in _STATE_FIELDS if name in data})

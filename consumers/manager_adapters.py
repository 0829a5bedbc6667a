"""The session manager at the shell's edge: its ports (events, take policy), the inbound loop's view of it,
and its configuration (adapter platforms, owner identities) read from the settings."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import tzinfo
from typing import Any

import orjson

from consumers.publisher import Publisher
from consumers.settings import Settings
from core.engine import TakeVerdict
from core.errors import InvalidInput
from core.sessions import take
from core.sessions.incoming_message import ChatScope, IncomingMessage, Sender
from core.sessions.manager import SessionManager
from core.sessions.platforms import AdapterInstance, OwnerIdentities, PlatformRegistry
from core.sessions.ports import ClearSessionData, SessionRepository
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)

def to_incoming(message: InboundMessage) -> IncomingMessage:
    """Map the wire inbound model onto the core's IncomingMessage."""
    chat = None
    if message.chat is not None:
        chat = ChatScope(
            type=message.chat.type,
            target_id=message.chat.target_id,
            multi_party=message.chat.multi_party,
            declared_one_to_one=message.chat.declared_one_to_one,
            name=message.chat.name,
        )
    sender = Sender(user_id=message.sender.user_id, name=message.sender.name) if message.sender else None
    return IncomingMessage(
        id=message.id,
        session_id=message.session_id,
        platform=message.platform,
        instance=message.instance,
        self_id=message.self_id,
        chat=chat,
        sender=sender,
        source=message.source,
        text=message.text,
    )


class ManagerRecorder:
    """The inbound loop's view of the session manager (wire model in, core model to the manager)."""

    def __init__(self, manager: SessionManager, on_created: Callable[[str], None] | None = None) -> None:
        self._manager = manager
        self._on_created = on_created

    async def record_inbound(self, message: InboundMessage) -> None:
        sid = message.session_id
        existed = sid is None or self._manager.get_session(sid) is not None
        await self._manager.record_inbound(to_incoming(message))
        if sid is not None and message.source is None and self._manager.get_session(sid) is None:
            # No chat scope to file a room from (SM-3): keep the session as a record filed by id,
            # which a later native inbound with a chat scope backfills.
            try:
                await self._manager.ensure_session(sid)
            except Exception as exc:  # SM-17: a failure to record is a warning, never a rejection
                log.warning("filing %s by id failed: %r", sid, exc)
        # Filed just now under an id that was never deleted: nothing of it can be stored (a deleted
        # id's history might outlive a crash between the deletion and its data clear).
        if (
            not existed and self._on_created is not None and self._manager.get_session(sid) is not None  # type: ignore[arg-type]
            and self._manager.generation_of(sid) == 0  # type: ignore[arg-type]
        ):
            self._on_created(sid)  # type: ignore[arg-type]

    def generation_of(self, session_id: str) -> int:
        return self._manager.generation_of(session_id)


class ManagerTakePolicy:
    """The engine's TakePolicy port, answered by the session manager's can_take (SM-24/SM-25).

    The engine passes the principal as ``"<platform>:<user_id>"`` (split at the first colon).
    """

    def __init__(self, manager: SessionManager, tz: tzinfo) -> None:
        self._manager = manager
        self._tz = tz

    def can_take(self, current_id: str, target_id: str, principal: str | None) -> TakeVerdict:
        verdict = self._manager.can_take(current_id, target_id, take.Principal.from_key(principal))
        return TakeVerdict(ok=True) if verdict.ok else TakeVerdict(ok=False, reason=verdict.reason.source(self._tz) if verdict.reason else None)


def platform_registry(settings: Settings) -> PlatformRegistry:
    """Adapter instances from ``TURNSTILE_PLATFORMS_JSON`` (see docs/protocol.md#platforms)."""
    if not settings.platforms_json.strip():
        return PlatformRegistry()
    try:
        items = orjson.loads(settings.platforms_json)
        instances = [
            AdapterInstance(
                instance_id=str(i["instance_id"]),
                platform=str(i["platform"]),
                type=str(i.get("type", "")),
                claims=tuple(str(c) for c in i.get("claims", [])),
                chat_scopes={str(k): bool(v) for k, v in (i.get("chat_scopes") or {}).items()},
            )
            for i in items
        ]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidInput(f"TURNSTILE_PLATFORMS_JSON is not a list of adapter instances: {exc!r}") from exc
    return PlatformRegistry(instances)


def owner_identities(settings: Settings) -> OwnerIdentities:
    pairs = []
    for item in settings.owners:
        platform, sep, user_id = item.partition(":")
        if not sep or not platform or not user_id:
            raise InvalidInput(f"owner identity {item!r} must be 'platform:user_id'")
        pairs.append((platform, user_id))
    return OwnerIdentities(pairs)


class ManagerEvents:
    """The session manager's event sink: session events are in the stream when ``emit`` returns
    (SM-32: ``session.deleted`` lands before the data clear), except the per-turn bookkeeping
    updates, which stay pipelined on the hot path (their order on the connection is kept)."""

    PIPELINED_CHANGES = frozenset({"turn_started", "turn_ended", "usage"})

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher

    async def emit(self, session_id: str, event_type: str, payload: Any) -> None:
        if event_type == "session.updated" and payload.get("change") in self.PIPELINED_CHANGES:
            await self._publisher.emit_unwatched(session_id, event_type, payload)  # a refusal is logged
            return
        sent = await self._publisher.emit(session_id, event_type, payload)
        if not await self._publisher.settle([sent]):
            log.warning("event %s of %s not acknowledged by the broker", event_type, session_id)

    async def emit_all(self, events: Sequence[tuple[str, str, Any]]) -> None:
        """Publish in order on the one connection, then wait for every ack (a deletion's chunk)."""
        sent = [await self._publisher.emit(sid, event_type, payload) for sid, event_type, payload in events]
        if not await self._publisher.settle(sent):
            log.warning("not all of %d session events were acknowledged by the broker", len(sent))

    async def stored_so_far(self) -> None:
        """SM-22: every publish sent before now answered by the broker (a deletion waits for it
        before its first ``session.deleted``: the outbound and events streams store
        independently of the connection's order), bounded by the publisher's timeout."""
        if not await self._publisher.stored_so_far():
            log.warning("publishes before a deletion's session.deleted not all acknowledged in time")


def build_manager(
    settings: Settings,
    repository: SessionRepository,
    publisher: Publisher,
    clear_session_data: ClearSessionData,
    clock: Callable[[], float] = time.time,
) -> SessionManager:
    """The session manager over ``repository``, its events published (and settled) by ``publisher``."""
    return SessionManager(
        repository,
        ManagerEvents(publisher),
        registry=platform_registry(settings),
        owners=owner_identities(settings),
        clear_session_data=clear_session_data,
        clock=clock,
    )

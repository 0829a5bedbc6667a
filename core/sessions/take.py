"""The one rule for taking (history, media) from another session: SM-24 … SM-26."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from core.sessions.records import DEFAULT_TAKE_SETTINGS, SessionRecord, TakeSettings
from core.sessions.rules import IsOwner, SessionLookup, is_unfiled, root_of
from core.sessions.text import TextRef


@dataclass(frozen=True)
class Principal:
    """One authorised identity acting in this turn: an account on a platform.

    Turns journal it as its ``key`` (``"<platform>:<user_id>"``); ``from_key`` reads
    it back. These two are the only places that spell or split that form.
    """

    platform: str
    user_id: str

    @property
    def key(self) -> str:
        """The journaled form, ``"<platform>:<user_id>"``."""
        return f"{self.platform}:{self.user_id}"

    @classmethod
    def from_key(cls, key: str | None) -> Principal | None:
        """The principal journaled as ``key``; None when absent or malformed (no platform or user)."""
        platform, sep, user_id = (key or "").partition(":")
        return cls(platform, user_id) if sep and platform and user_id else None


@dataclass(frozen=True)
class TakeVerdict:
    """``ok`` or a refusal with a text-object ``reason`` (the model gets ``reason.source(tz)``)."""

    ok: bool
    reason: TextRef | None = None


TAKE_OK: Final = TakeVerdict(True)
TAKE_UNKNOWN: Final = TextRef("take.unknown")
TAKE_SCOPE_SESSION: Final = TextRef("take.scope_session")
TAKE_OTHER_PLATFORM: Final = TextRef("take.other_platform")
TAKE_CROSS_BOT_ACCOUNT: Final = TextRef("take.cross_bot_account")
TAKE_OTHER_GROUP: Final = TextRef("take.other_group")
TAKE_OTHERS_DM: Final = TextRef("take.others_dm")

# Does the origin platform's adapter explicitly declare this root's window one-to-one?
DeclaredOneToOne = Callable[[SessionRecord], bool]


class TakeChecker(Protocol):
    """Anything that answers can_take (the session manager)."""

    def can_take(self, current_id: str, target_id: str, principal: Principal | None = None) -> TakeVerdict: ...


def deny(reason: TextRef) -> TakeVerdict:
    """A refusal with ``reason``."""
    return TakeVerdict(False, reason)


def root_platform(root: SessionRecord) -> str | None:
    """The platform a root belongs to: IM origin platform, else created_from (WebUI, CLI, project)."""
    return root.origin_platform or root.created_from


def effective_take_settings(record: SessionRecord, lookup: SessionLookup) -> TakeSettings:
    """The session's own take settings, else its root's, else the default (scope ``session``)."""
    if record.take_settings is not None:
        return record.take_settings
    root = root_of(record.id, lookup)
    if root is not None and root.take_settings is not None:
        return root.take_settings
    return DEFAULT_TAKE_SETTINGS


def one_to_one_with(
    room: SessionRecord,
    principal: Principal | None,
    declared: bool,
    is_owner: IsOwner | None = None,
) -> bool:
    """SM-26: is this IM one-to-one window the principal's own private chat with her?

    Only when ``declared`` (the adapter explicitly declared the window
    one-to-one) and either the peer is the principal's account on the origin
    platform, or both are owner identities (only when ``is_owner`` is given).
    """
    if principal is None or not principal.user_id or not declared:
        return False
    chat = room.origin_chat
    if room.origin_platform is None or chat is None or not chat.target_id:
        return False
    if principal.platform == room.origin_platform and principal.user_id == chat.target_id:
        return True
    if is_owner is None:
        return False
    return is_owner(principal.platform, principal.user_id) and is_owner(room.origin_platform, chat.target_id)


def _resolvable_root(session_id: str, lookup: SessionLookup) -> SessionRecord | None:
    root = root_of(session_id, lookup)
    if root is None or is_unfiled(root):
        return None
    if root.origin_platform and root.origin_chat is None:
        return None
    return root


def can_take(
    current_id: str,
    target_id: str,
    principal: Principal | None,
    *,
    lookup: SessionLookup,
    is_owner: IsOwner | None,
    declared_one_to_one: DeclaredOneToOne,
) -> TakeVerdict:
    """SM-24: may the current session take from the target? Checked in the seed's order.

    (1) same id or same root → ok; (2) either root unresolvable → TAKE_UNKNOWN;
    (3) the current session's scope; (4) by target: another bot account, a
    group, or someone else's one-to-one chat each need their toggle.
    """
    if principal is not None and not principal.user_id:
        principal = None
    if current_id == target_id:
        return TAKE_OK
    current_root = _resolvable_root(current_id, lookup)
    target_root = _resolvable_root(target_id, lookup)
    if current_root is not None and target_root is not None and current_root.id == target_root.id:
        return TAKE_OK
    current = lookup(current_id)
    if current is None or current_root is None or target_root is None:
        return deny(TAKE_UNKNOWN)

    settings = effective_take_settings(current, lookup)
    current_platform = root_platform(current_root)
    target_platform = root_platform(target_root)
    same_platform = current_platform is not None and current_platform == target_platform
    if settings.scope == "session":
        return deny(TAKE_SCOPE_SESSION)
    if settings.scope == "same-platform" and not same_platform:
        return deny(TAKE_OTHER_PLATFORM)

    current_self = current_root.origin_chat.self_id if current_root.origin_chat else None
    target_self = target_root.origin_chat.self_id if target_root.origin_chat else None
    other_account = same_platform and current_self and target_self and current_self != target_self
    if other_account and not settings.cross_bot_account:
        return deny(TAKE_CROSS_BOT_ACCOUNT)
    target_chat = target_root.origin_chat
    if target_chat is not None and target_chat.multi_party:
        return TAKE_OK if settings.read_other_groups else deny(TAKE_OTHER_GROUP)
    if target_chat is not None:
        own = one_to_one_with(target_root, principal, declared_one_to_one(target_root), is_owner)
    else:
        # WebUI, CLI and project sessions count as one-to-one with the owner.
        own = principal is not None and is_owner is not None and is_owner(principal.platform, principal.user_id)
    if own or settings.read_others_dms:
        return TAKE_OK
    return deny(TAKE_OTHERS_DM)


def take_from(
    checker: TakeChecker | None,
    current_id: str,
    target_id: str,
    principal: Principal | None = None,
) -> TakeVerdict:
    """SM-25: ask the manager when there is one; without one only the same id is ok."""
    if checker is not None:
        return checker.can_take(current_id, target_id, principal)
    return TAKE_OK if current_id == target_id else deny(TAKE_UNKNOWN)

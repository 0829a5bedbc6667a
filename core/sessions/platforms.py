"""Which platform adapter instances exist, what session ids they claim, how they scope chats.

Claims: each entry of ``AdapterInstance.claims`` is either an exact session id
(``telegram:group:42``) or a prefix pattern ending in ``*`` (``telegram:*``
claims every id that starts with ``telegram:``; ``*`` alone claims every id).
An instance with no claims claims nothing.

Default: when NO instance is configured for a message's platform, that
platform is its own claimant (instance id = the message's ``instance``, or the
platform name), so the embedded default works without set-up.

Chat scope: ``AdapterInstance.chat_scopes`` maps a chat type name to its
declared scope (``True`` = multi-party, ``False`` = one-to-one). A declaration
wins over what a single message says; a message's ``declared_one_to_one`` flag
is remembered for its platform and chat type when no instance declares one
(persisted and shared with the other processes through ``on_learned``, see
consumers/shared_state.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from core.errors import InvalidInput
from core.sessions.incoming_message import ChatScope


@dataclass(frozen=True)
class AdapterInstance:
    """One platform adapter instance: its id, platform, adapter type, claims and chat scopes."""

    instance_id: str
    platform: str
    type: str = ""
    claims: tuple[str, ...] = ()
    chat_scopes: Mapping[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.instance_id or not self.platform:
            raise InvalidInput("an adapter instance needs an instance_id and a platform")

    def claims_session(self, session_id: str) -> bool:
        """Does this instance claim ``session_id`` (exact id or ``prefix*`` pattern)?"""
        for claim in self.claims:
            if claim.endswith("*"):
                if session_id.startswith(claim[:-1]):
                    return True
            elif claim == session_id:
                return True
        return False


class PlatformRegistry:
    """The adapter instances known to the service; configured at start, registrable at run time."""

    def __init__(self, instances: Iterable[AdapterInstance] = ()) -> None:
        self._instances: dict[str, AdapterInstance] = {}
        self._learned_one_to_one: set[tuple[str, str]] = set()
        # Told (platform, chat type) when a message first declares that chat type one-to-one here.
        self.on_learned: Callable[[str, str], None] | None = None
        for instance in instances:
            self.register(instance)

    def register(self, instance: AdapterInstance) -> None:
        """Add an instance, or replace the one with the same ``instance_id`` (keeps its order)."""
        self._instances[instance.instance_id] = instance

    def unregister(self, instance_id: str) -> bool:
        """Remove an instance; True when it existed."""
        return self._instances.pop(instance_id, None) is not None

    def instances(self) -> list[AdapterInstance]:
        """All instances in registration order."""
        return list(self._instances.values())

    def has_platform(self, platform: str) -> bool:
        """Is any instance configured for ``platform``?"""
        return any(i.platform == platform for i in self._instances.values())

    def claimants_of(
        self, session_id: str, *, platform: str | None = None, instance: str | None = None
    ) -> list[AdapterInstance]:
        """The instances claiming ``session_id``, in registration order.

        ``platform``/``instance`` name the message's entry point: when no instance
        at all is configured for that platform, it is appended as its own claimant.
        """
        found = [i for i in self._instances.values() if i.claims_session(session_id)]
        if platform and not self.has_platform(platform):
            found.append(AdapterInstance(instance_id=instance or platform, platform=platform, claims=(session_id,)))
        return found

    def declared_multi_party(self, platform: str, chat_type: str) -> bool | None:
        """The scope declared for ``chat_type`` by an instance of ``platform``, or None."""
        for inst in self._instances.values():
            if inst.platform == platform and chat_type in inst.chat_scopes:
                return inst.chat_scopes[chat_type]
        if (platform, chat_type) in self._learned_one_to_one:
            return False
        return None

    def is_declared_one_to_one(self, platform: str, chat_type: str) -> bool:
        """True only when the window type is explicitly declared one-to-one (SM-26)."""
        return self.declared_multi_party(platform, chat_type) is False

    def note_message_declaration(self, platform: str, chat: ChatScope) -> None:
        """Remember a message's explicit one-to-one declaration for its platform and chat type."""
        key = (platform, chat.type)
        if chat.declared_one_to_one and key not in self._learned_one_to_one:
            self._learned_one_to_one.add(key)
            if self.on_learned is not None:
                self.on_learned(platform, chat.type)

    def learn_one_to_one(self, declarations: Iterable[tuple[str, str]]) -> None:
        """Install (platform, chat type) pairs declared one-to-one elsewhere (another process, an earlier run)."""
        self._learned_one_to_one.update(declarations)

    def learned_one_to_one(self) -> set[tuple[str, str]]:
        """The (platform, chat type) pairs messages declared one-to-one."""
        return set(self._learned_one_to_one)

    def resolve_multi_party(self, platform: str, chat: ChatScope) -> bool:
        """The multi-party flag to record for ``chat``: declaration, else the message's own flags."""
        declared = self.declared_multi_party(platform, chat.type)
        if declared is not None:
            return declared
        if chat.declared_one_to_one:
            return False
        return chat.multi_party


class OwnerIdentities:
    """The authority's owner identities: (platform, user_id) pairs from settings."""

    def __init__(self, identities: Iterable[tuple[str, str]] = ()) -> None:
        self._identities = frozenset((p, u) for p, u in identities if p and u)

    def is_owner(self, platform: str, user_id: str) -> bool:
        """Is ``user_id`` on ``platform`` one of the owner's accounts?"""
        return bool(user_id) and (platform, user_id) in self._identities

    def __len__(self) -> int:
        return len(self._identities)

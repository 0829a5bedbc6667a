"""What the operator endpoint (health, metrics, inspector) reads of a turnstile process.

``TurnstileService`` answers it; the endpoint's routes are registered before the process
serves (a standby answers health checks), so every running part may be ``None``.
"""

from __future__ import annotations

from typing import Protocol

from faststream.nats import NatsBroker
from nats.js import JetStreamContext

from consumers.actors import ActorRegistry
from consumers.inbound_loop import InboundLoop
from consumers.metrics import Metrics
from consumers.publisher import Publisher
from consumers.settings import Settings
from core.sessions.manager import SessionManager
from schemas.subjects import Subjects


class ProcessView(Protocol):
    """A turnstile process as its operator endpoint sees it."""

    settings: Settings
    subjects: Subjects
    metrics: Metrics
    role: str

    @property
    def broker(self) -> NatsBroker | None: ...

    @property
    def js(self) -> JetStreamContext | None: ...

    @property
    def manager(self) -> SessionManager | None: ...

    @property
    def publisher(self) -> Publisher | None: ...

    @property
    def actors(self) -> ActorRegistry | None: ...

    @property
    def inbound(self) -> InboundLoop | None: ...

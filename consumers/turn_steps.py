"""The steps in which turns differ, and what the one turn sequence passes between them.

``TurnRunner.serve_turn`` is the one sequence (DESIGN "Flow"): generation check → load →
stage → turn.started → run → generation check → deliver → turn.ended → settle → finish.
An inbound message (``inbound_turn.py``) and every control-started turn (``turn_operations.py``:
retry, free time, wakeup, ingress) pass in a ``TurnSteps``: how the item's generation is
checked, how the session is loaded, how the turn is staged and where it delivers (a
``TurnPlan``), and what finishes the item (the inbox mark and finisher, or the control reply).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from consumers.replies import ReplyTarget
from core.engine import Session
from core.engine.snapshot import EncodedSnapshot

Checkpointer = Callable[[EncodedSnapshot], Awaitable[None]]
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class TurnResult:
    """How a turn ended: ``outcome`` (replied, silent, aborted, error), replies delivered, and
    ``stale`` when its session was deleted meanwhile (nothing was delivered)."""

    outcome: str
    error: str | None
    delivered: int = 0
    stale: bool = False


@dataclass(frozen=True)
class TurnPlan:
    """A staged turn, ready to run: its generation, where its replies go, what its events carry.

    ``answers_inbound``: the turn answers an inbound message (its reply latency is metered, a
    provider failure gets ``TURNSTILE_PROVIDER_FAILURE_REPLY``, its text is streamed).
    ``deadline_s`` stops the run (``deadline``) after that long. ``on_started`` is told the turn
    began (a control caller that does not wait is answered then).
    """

    generation: int
    target: ReplyTarget | None
    started: dict[str, Any]
    ended: dict[str, Any]
    inbound_id: str | None = None
    answers_inbound: bool = False
    deadline_s: float | None = None
    on_started: Callable[[dict[str, Any]], None] | None = None


class TurnSteps(Protocol[R_co]):
    """What differs between the turns ``TurnRunner.serve_turn`` runs."""

    def current(self) -> Awaitable[bool]:
        """The generation check before the turn; False: the item is over (it was dropped)."""
        ...

    def load(self) -> Awaitable[Session]:
        """The session's engine (refused when it does not exist and must)."""
        ...

    def stage(self, engine: Session) -> Awaitable[TurnPlan | None]:
        """Stage the turn; None: the item is over without a turn (dropped, or answered before)."""
        ...

    def finish(self, engine: Session, result: TurnResult) -> Awaitable[R_co]:
        """Settle and finish the item after its turn; the result of ``serve_turn``."""
        ...

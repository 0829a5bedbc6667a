"""What the soak driver did: the messages it published, the deletions it made, the kills it dealt."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.soak.config import SoakConfig


@dataclass(frozen=True)
class Published:
    """One accepted inbound message (JetStream acked the publish)."""

    msg_id: str
    session_id: str
    index: int  # its place in the session's sequence (also in its text)
    text: str  # the text the scripted provider echoes (directive lines put before it are not echoed)
    inbound_seq: int  # stream sequence from the publish ack
    sent_at: float  # just before the publish
    acked_at: float  # epoch seconds, this host's clock (the server's clock too: same host)


@dataclass(frozen=True)
class Deletion:
    """One ``session.delete`` through the control API."""

    session_id: str
    requested_at: float
    done_at: float
    generation: int  # the session's new generation (the reply's ``generation``)


@dataclass(frozen=True)
class Kill:
    """One SIGKILL of the service and the restart after ``restart_delay_s``."""

    killed_at: float
    restart_delay_s: float
    ready_at: float
    trigger: str


@dataclass
class SoakRecord:
    """Everything the oracle needs besides the streams."""

    config: SoakConfig
    prefix: str
    started_at: float
    published: list[Published] = field(default_factory=list)
    deletions: list[Deletion] = field(default_factory=list)
    skipped_deletions: list[str] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    last_fault_at: float = 0.0
    drained_after_s: float | None = None  # clause 4: None when not everything was accounted for in time
    finished_at: float = 0.0

"""Session construction values: runtime model, agent mode, work binding, options (KS-1..KS-3)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.errors import InvalidInput

ModeKind = Literal["conversation", "free_time", "wakeup", "ingress"]

DEFAULT_MAX_ROUNDS = 16


class RuntimeModel(BaseModel):
    """The exact model, reasoning effort and verified context window, used mechanically (KS-2)."""

    model_config = ConfigDict(frozen=True)

    model: str
    reasoning_effort: str = ""
    context_window_tokens: int = Field(gt=0)


class AgentMode(BaseModel):
    """Completion policy (KS-3): ``conversation`` may stay open; the others finalize their
    own write session and are completed after their pending turn."""

    model_config = ConfigDict(frozen=True)

    kind: ModeKind = "conversation"
    record_id: str | None = None

    @model_validator(mode="after")
    def _record_only_for_ingress(self) -> AgentMode:
        if self.record_id is not None and self.kind != "ingress":
            raise ValueError("record_id is only meaningful for ingress mode")
        return self

    @classmethod
    def conversation(cls) -> AgentMode:
        """An ordinary conversation."""
        return cls(kind="conversation")

    @classmethod
    def free_time(cls) -> AgentMode:
        """A free-time slice."""
        return cls(kind="free_time")

    @classmethod
    def wakeup(cls) -> AgentMode:
        """A scheduled wakeup."""
        return cls(kind="wakeup")

    @classmethod
    def ingress(cls, record_id: str | None) -> AgentMode:
        """History ingress of a terminated conversation identified by ``record_id``."""
        return cls(kind="ingress", record_id=record_id)

    @property
    def is_conversation(self) -> bool:
        """True for an ordinary conversation."""
        return self.kind == "conversation"


class WorkBinding(BaseModel):
    """Directories file tools may touch: root, extra roots, worktrees; ``current_dir`` is
    where relative paths start (absent: ``root``)."""

    model_config = ConfigDict(frozen=True)

    root: str
    extra_roots: tuple[str, ...] = ()
    worktrees: tuple[str, ...] = ()
    current_dir: str | None = None

    def allowed_dirs(self) -> list[str]:
        """Every directory a path may resolve into, in declaration order."""
        return [self.root, *self.extra_roots, *self.worktrees]


class SessionOptions(BaseModel):
    """Everything the caller selects for a session besides prompt and runtime (KS-1)."""

    session_type: str
    root_node_ids: list[str] = Field(default_factory=list)
    reference_root_node_ids: list[str] = Field(default_factory=list)
    channel: dict[str, Any] = Field(default_factory=dict)
    free_time: dict[str, Any] = Field(default_factory=dict)
    orchestration: dict[str, Any] = Field(default_factory=dict)
    provenance_id: str | None = None
    mode: AgentMode = Field(default_factory=AgentMode.conversation)
    source_session_type: str | None = None
    group_context: dict[str, Any] = Field(default_factory=dict)
    managed_source_session_id: str | None = None
    work: WorkBinding | None = None
    max_rounds: int = Field(default=DEFAULT_MAX_ROUNDS, gt=0)

    @model_validator(mode="after")
    def _normalise(self) -> SessionOptions:
        self.root_node_ids = _ordered_unique(self.root_node_ids)
        writable = set(self.root_node_ids)
        self.reference_root_node_ids = sorted(
            {r for r in self.reference_root_node_ids if r not in writable}
        )
        return self

    @classmethod
    def conversation(cls, session_type: str, roots: list[str]) -> SessionOptions:
        """An idle conversation with ordered writable roots (KS-1). Set the other fields
        afterwards with ``with_changes``; reference roots are normalised again then."""
        if not session_type:
            raise InvalidInput("session_type must not be empty")
        return cls(session_type=session_type, root_node_ids=list(roots))

    def with_changes(self, **changes: Any) -> SessionOptions:
        """A copy with ``changes`` applied and normalisation re-run."""
        data = self.model_dump()
        data.update(changes)
        return SessionOptions.model_validate(data)


def _ordered_unique(values: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for value in values:
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out

"""The control API's catalog: every operation of every area, bound to the parts it uses
(``control_operations``, served by the running process), and the same declarations read
without a running service (``operation_specs``: ``turnstile api --list`` / ``api OP --help``,
the AsyncAPI export).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from typing import Any, cast

from pydantic import BaseModel

from consumers.answer_operations import operations as answer_operations
from consumers.api import Operation
from consumers.control_parts import ControlParts
from consumers.paging import reply_budget
from consumers.rendering import rendering
from consumers.session_operations import other_operations, session_operations
from consumers.state_operations import operations as state_operations
from consumers.turn_operations import operations as turn_operations


@dataclass(frozen=True)
class OperationSpec:
    """What a client needs to know about one control operation."""

    name: str
    summary: str
    request: type[BaseModel]
    result: Any


def control_operations(parts: ControlParts) -> list[Operation]:
    """Every control operation of the service, each area bound to the parts it uses."""
    render = rendering(parts.time_zone, parts.manager)

    def budget_bytes() -> int:
        """Bytes of list items one reply may carry: under the connected server's max payload."""
        return reply_budget(parts.max_payload_bytes())

    own = [
        *session_operations(parts.manager, render, budget_bytes, parts.shared),
        *other_operations(parts.manager, render, budget_bytes, parts.clear_history, parts.shared),
    ]
    names = {(op.resource, op.verb) for op in own}
    extra = []
    for op in [*turn_operations(parts.actors, parts.manager, parts.opener),
               *answer_operations(parts.manager, parts.opener),
               *state_operations(parts.manager, parts.opener, parts.last_checkpoint, budget_bytes)]:
        if (op.resource, op.verb) in names:
            raise RuntimeError(f"control operation {op.resource}.{op.verb} is defined twice")
        names.add((op.resource, op.verb))
        extra.append(op)
    return [*own, *extra]


def declared_operations() -> list[Operation]:
    """The operations as declared, bound to nothing (the catalog reads names and models; never called)."""
    unbound = cast(Any, None)
    return control_operations(ControlParts(unbound, unbound, unbound, unbound, lambda: 1_048_576, UTC, unbound))


def operation_specs() -> list[OperationSpec]:
    """Every control operation, in declaration order."""
    return [OperationSpec(op.name, op.summary, op.request, op.result) for op in declared_operations()]


def find(name: str) -> OperationSpec | None:
    """The operation ``resource.verb``, or None."""
    return next((spec for spec in operation_specs() if spec.name == name), None)

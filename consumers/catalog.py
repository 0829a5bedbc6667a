"""The control API's catalog without a running service: every operation's name, summary,
request model and result type, read from the same ``Operation`` declarations the service serves.

Used by ``turnstile api --list`` / ``api OP --help`` and by the AsyncAPI export.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class OperationSpec:
    """What a client needs to know about one control operation."""

    name: str
    summary: str
    request: type[BaseModel]
    result: Any


def operation_specs() -> list[OperationSpec]:
    """Every control operation, in declaration order."""
    from consumers.operations import declared_operations

    return [OperationSpec(op.name, op.summary, op.request, op.result) for op in declared_operations()]


def find(name: str) -> OperationSpec | None:
    """The operation ``resource.verb``, or None."""
    return next((spec for spec in operation_specs() if spec.name == name), None)

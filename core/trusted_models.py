"""Pydantic models built from values this process made itself, without validating them again.

Validation belongs at the boundary (what arrives from the wire, a store or a caller). On the
hot path the engine builds models from values that already have their fields' types (a
journal entry from a draft it made, a model request from its own projection), and validating
those walked their payloads again at every durable step. ``trusted`` installs the values the
way ``BaseModel.model_construct`` does, less its per-field alias and default lookups: the
caller passes every field. ``tests/unit/test_trusted_models.py`` checks that the result equals
the validated model, so a pydantic release that stores a model's state differently fails there.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

ModelT = TypeVar("ModelT", bound=BaseModel)

_set = object.__setattr__


def trusted(cls: type[ModelT], fields: dict[str, Any]) -> ModelT:
    """An instance of ``cls`` (no extra fields, no private attributes, no post-init) holding
    ``fields``: every one of its fields, each value already of the field's type. ``fields``
    becomes the instance's ``__dict__`` (not copied)."""
    model = cls.__new__(cls)
    _set(model, "__dict__", fields)
    _set(model, "__pydantic_fields_set__", set(fields))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model

"""``python -m tests.faults.effect_service run``: the real ``turnstile run`` with the test-only effect tools."""

from __future__ import annotations

import sys

import consumers.bootstrap
from consumers.cli import main
from core.engine.tools import ToolDefinition, ToolRegistry, builtin_registry
from tests.faults.effect_tool import EFFECT_TOOLS


def _registry_with_effects(extra: list[ToolDefinition] | None = None) -> ToolRegistry:
    return builtin_registry([*EFFECT_TOOLS, *(extra or [])])


if __name__ == "__main__":
    consumers.bootstrap.builtin_registry = _registry_with_effects
    sys.exit(main(sys.argv[1:]))

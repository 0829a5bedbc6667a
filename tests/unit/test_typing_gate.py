"""The typing and lint gate of the checked packages: ``mypy`` (strict, pydantic plugin) and
``ruff`` with the configuration in pyproject.toml report nothing.

To gate another package, add it to ``PACKAGES``; ``LINTED`` are linted only (``bench/``: the measuring
tools, and ``tests/``: neither typed strictly).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["core", "schemas", "consumers"]
LINTED = [*PACKAGES, "bench", "tests"]


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` in the repository (its caches, .mypy_cache and .ruff_cache, stay there)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(600)
def test_mypy_strict_reports_nothing() -> None:
    result = run_tool("mypy", *PACKAGES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("package", LINTED)
def test_ruff_reports_nothing(package: str) -> None:
    result = run_tool("ruff", "check", package)
    assert result.returncode == 0, result.stdout + result.stderr

"""The session rules import no SQL, NATS or FastStream code (DESIGN: core is pure)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PURE_MODULES = [
    "core.sessions.rules",
    "core.sessions.take",
    "core.sessions.text",
    "core.sessions.records",
    "core.sessions.turns",
    "core.sessions.inbound",
    "core.sessions.manager",
]


@pytest.mark.rule("SM-1", "SM-24", "SM-27")
def test_session_core_imports_no_io_libraries() -> None:
    # SM-1, SM-24, SM-27: the pure rules stand alone
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PURE_MODULES)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'sqlalchemy', 'nats', 'faststream', 'asyncpg', 'aiosqlite'})\n"
        + "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    assert result.stdout.strip() == ""

"""The pure core imports no SQL, NATS, FastStream or HTTP code (DESIGN: core is pure).

The session rules and the whole session engine (every module of ``core.sessions``'
rules and of ``core.engine``, its tools included) are imported in a fresh
interpreter, which must then hold none of the I/O libraries. Adapters live in
``core.store`` and ``core.providers.openai_chat`` behind ports.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import core.engine
import core.engine.tools

ROOT = Path(__file__).resolve().parents[3]
IO_LIBRARIES = {"sqlalchemy", "nats", "faststream", "asyncpg", "aiosqlite", "httpx"}
SESSION_RULES = [
    "core.sessions.rules",
    "core.sessions.take",
    "core.sessions.text",
    "core.sessions.records",
    "core.sessions.turn_records",
    "core.sessions.incoming_message",
    "core.sessions.manager",
]
ENGINE = [f"core.engine.{m.name}" for m in pkgutil.iter_modules(core.engine.__path__)] + [
    f"core.engine.tools.{m.name}" for m in pkgutil.iter_modules(core.engine.tools.__path__)
]


def io_libraries_loaded_by(modules: list[str]) -> list[str]:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"bad = sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(IO_LIBRARIES)!r}))\n"
        + "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    return [name for name in result.stdout.strip().split(",") if name]


def test_the_session_rules_import_no_io_libraries() -> None:
    assert io_libraries_loaded_by(SESSION_RULES) == []


def test_the_inbox_port_imports_no_io_libraries() -> None:
    assert io_libraries_loaded_by(["core.inbox"]) == []


def test_the_session_engine_imports_no_io_libraries() -> None:
    assert len(ENGINE) > 20  # every module of the engine, found on disk
    assert io_libraries_loaded_by(ENGINE) == []

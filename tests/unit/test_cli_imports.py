"""The CLI's client commands start without importing the service (``turnstile --help`` took 1.8 s).

``consumers.cli`` is what every ``turnstile`` command imports first. The service's modules
(the operation catalog, the turn runner, SQLAlchemy, FastStream, the MCP SDK) cost ~1 s to
import and only ``run``, ``migrate``, ``api --list`` and ``api OP --help`` need them, each
importing them when it runs (an ``api`` call does not: the service refuses an unknown
operation). A fresh interpreter is used: this test process has imported everything already.
That `api --list` still finds the catalog is tests/unit/test_cli_offline.py's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]

# Modules that a client command must not import at start: each pulls in the service, or a
# library only the service uses.
SERVICE_ONLY = ("consumers.catalog", "consumers.service", "consumers.turn_runner", "core.engine", "sqlalchemy",
                "faststream", "mcp", "alembic")

PROBE = """
import sys, orjson
import consumers.cli
print(orjson.dumps(sorted(sys.modules)).decode())
"""


def modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return set(orjson.loads(done.stdout))


def test_the_cli_imports_no_service_module_until_a_command_needs_one() -> None:
    loaded = modules_after(PROBE)
    assert "consumers.cli" in loaded and "typer" in loaded  # the probe did import the CLI
    heavy = sorted(m for m in loaded if any(m == s or m.startswith(f"{s}.") for s in SERVICE_ONLY))
    assert heavy == [], f"importing consumers.cli imported service modules: {heavy[:10]}"



CALL_PROBE = """
import sys, orjson
from consumers.cli import main
code = main(["--server", "nats://127.0.0.1:1", "api", "session.get", '{"session_id": "s1"}'])
print(orjson.dumps({"code": code, "modules": sorted(sys.modules)}).decode())
"""


def test_an_api_call_imports_no_service_module() -> None:
    done = subprocess.run([sys.executable, "-c", CALL_PROBE], cwd=ROOT, capture_output=True, check=True, timeout=60)
    ran = orjson.loads(done.stdout)
    assert ran["code"] == 1 and b"cannot connect to NATS" in done.stderr  # it got as far as connecting
    loaded = set(ran["modules"])
    heavy = sorted(m for m in loaded if any(m == s or m.startswith(f"{s}.") for s in SERVICE_ONLY))
    assert heavy == [], f"`turnstile api OP` imported service modules: {heavy[:10]}"

"""turnstile as a child process (``python -m consumers.cli run``) and the phases driven against it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.common import Child

READY_MARKER = "turnstile ready on"
READY_TIMEOUT_S = 60.0


def new_prefix(tag: str) -> str:
    """A unique subject prefix; equal length for every worker so subjects store alike."""
    return f"{tag}{uuid.uuid4().hex[:8]}"


@dataclass
class ServiceConfig:
    """What one service process gets through its ``TURNSTILE_*`` environment."""

    nats_url: str
    prefix: str
    db_path: Path
    extra_env: dict[str, str] | None = None

    def env(self) -> dict[str, str]:
        env = {
            "TURNSTILE_NATS_URL": self.nats_url,
            "TURNSTILE_DATABASE_URL": f"sqlite+aiosqlite:///{self.db_path}",
            "TURNSTILE_PREFIX": self.prefix,
            "TURNSTILE_PROVIDER": "scripted",
            "TURNSTILE_SCRIPTED_DIRECTIVES": "true",
            "TURNSTILE_HTTP_PORT": "0",  # an ephemeral operator port: readiness is the log line, not HTTP
        }
        env.update(self.extra_env or {})
        return env


async def start_service(config: ServiceConfig, log_path: Path, *, shell_off: bool = False) -> Child:
    """Start the service and wait for its ready line (bounded). ``shell_off``: with the rule-keeping parts of
    its shell switched off (bench/ablation.py; the ``turnstile-off`` row, a measurement of what they cost)."""
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    module = ["-m", "bench.ablation"] if shell_off else ["-m", "consumers.cli", "run"]
    child = Child(module, config.env(), log_path)
    await child.wait_ready(READY_MARKER, READY_TIMEOUT_S)
    return child


async def start_baseline(nats_url: str, prefix: str, shape_json: str, log_path: Path, max_s: float) -> Child:
    child = Child(
        ["-m", "bench.baseline", "--nats-url", nats_url, "--prefix", prefix, "--shape", shape_json, "--max-s", str(max_s)],
        {},
        log_path,
    )
    await child.wait_ready("baseline ready", 30.0)
    return child


async def start_floor(
    nats_url: str, prefix: str, shape_json: str, log_path: Path, max_s: float, *, engine: bool = False,
    pg_url: str | None = None,
) -> Child:
    """The guarantee floor (bench/floor.py), ready and waiting for ``<prefix>.bench.go``; one SQLite file per prefix,
    or the PostgreSQL database ``pg_url``. ``engine``: with turnstile's turn engine (``--engine``, bench/floor_engine.py)."""
    store = ["--pg-url", pg_url] if pg_url else ["--db", str(log_path.parent / f"{prefix}.db")]
    args = ["-m", "bench.floor", "--nats-url", nats_url, "--prefix", prefix, "--shape", shape_json, *store]
    child = Child([*args, "--max-s", str(max_s), *(["--engine"] if engine else [])], {}, log_path)
    await child.wait_ready("floor ready", 30.0)
    return child


async def start_peer(nats_url: str, prefix: str, pg_url: str, log_path: Path, max_s: float) -> Child:
    """The fair peer (bench/langgraph_nats_peer.py), ready and waiting for ``<prefix>.bench.go``."""
    child = Child(
        ["-m", "bench.langgraph_nats_peer", "--nats-url", nats_url, "--prefix", prefix, "--pg-url", pg_url, "--max-s", str(max_s)],
        {},
        log_path,
    )
    await child.wait_ready("peer ready", 60.0)
    return child

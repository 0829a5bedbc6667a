"""The CLI's commands that need no server: version, help, the operation catalog, argument errors."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from consumers.catalog import operation_specs
from consumers.cli_time import parse_since
from tests.integration.cli_process import turnstile


async def test_version_and_help() -> None:
    version = await turnstile("--version")
    assert version.code == 0 and version.stdout.startswith("turnstile ")
    helped = await turnstile("--help")
    assert helped.code == 0
    for word in ("--server", "--prefix", "--creds", "--user", "--password", "--token", "--tls-ca", "--tls-cert",
                 "--tls-key", "--json", "sessions", "show", "tail", "replay", "send", "api", "run"):
        assert word in helped.stdout, word


async def test_api_list_shows_every_operation_with_its_summary() -> None:
    listed = await turnstile("api", "--list")
    assert listed.code == 0, listed.stderr
    specs = operation_specs()
    assert len(listed.lines) == len(specs)
    for spec, line in zip(specs, listed.lines, strict=True):
        assert line.split()[0] == spec.name and line.endswith(spec.summary)


async def test_api_op_help_shows_its_request_fields() -> None:
    helped = await turnstile("api", "session.update", "--help")
    assert helped.code == 0, helped.stderr
    assert "session_id: str (required)" in helped.stdout
    assert "changes: SessionChangesIn (required)" in helped.stdout
    assert "Result: SessionOut" in helped.stdout
    listing = await turnstile("api", "knowledge.list", "--help")
    assert "limit: int (default 50)" in listing.stdout


@pytest.mark.parametrize("args", [
    ("api", "no such"),
    ("api", "session.*"),
    ("api", "session.get", "{not json"),
    ("replay", "events", "--session", "s1", "--since", "last tuesday"),
    ("replay", "everything", "--session", "s1"),
    ("send", "--session", "s1"),
    ("frobnicate",),
    ("--prefix", "bad.prefix", "sessions"),
])
async def test_errors_are_one_line_and_a_nonzero_exit(args: tuple[str, ...]) -> None:
    ran = await turnstile(*args)
    assert ran.code != 0
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("turnstile: "), ran.stderr


def test_since_naive_is_utc_spans_and_bad_values() -> None:
    assert parse_since("2026-11-30T10:00") == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    assert parse_since("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_since("2026-11-30T10:00:00Z") == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    assert parse_since("2026-11-30T11:00:00+01:00") == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("15m", now) == now - timedelta(minutes=15)
    assert parse_since("2h ago", now) == now - timedelta(hours=2)
    assert parse_since("1d", now) == now - timedelta(days=1)
    with pytest.raises(ValueError, match="is not a time"):
        parse_since("yesterday-ish")


def test_the_cli_module_loads_no_nats_client_or_database_driver() -> None:
    # What every command pays before it runs (``turnstile --version`` too): nats-py brings aiohttp
    # (~0.2 s here), so it is imported only by the commands that connect; tenacity only by `send`'s publish.
    probe = ("import sys, consumers.cli; "
             "print(sorted(m for m in ('nats', 'aiohttp', 'sqlalchemy', 'tenacity') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

"""Service settings, read once at start-up from ``TURNSTILE_*`` environment variables."""

from __future__ import annotations

import logging
from datetime import tzinfo
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DB_PATH = Path("var") / "turnstile.db"

log = logging.getLogger(__name__)


class Settings(BaseSettings):
    """Everything configurable about one turnstile process."""

    model_config = SettingsConfigDict(env_prefix="TURNSTILE_", extra="ignore")

    nats_url: str = Field("nats://127.0.0.1:4333", description="NATS server URL")
    nats_creds_file: str = Field("", description="NATS user credentials file (.creds: JWT and nkey seed)")
    nats_nkey_seed_file: str = Field("", description="NATS nkey seed file (nkey authentication)")
    nats_user: str = Field("", description="NATS user name (with TURNSTILE_NATS_PASSWORD)")
    nats_password: SecretStr = Field(SecretStr(""), description="NATS password (never logged)")
    nats_token: SecretStr = Field(SecretStr(""), description="NATS authentication token (never logged)")
    nats_inbox_prefix: str = Field(
        "_INBOX", pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$",
        description="prefix of this connection's reply subjects; with nats.conf's roles `_INBOX.<user>` (docs/security.md)",
    )
    nats_tls_ca_file: str = Field("", description="CA file that verifies the NATS server's TLS certificate")
    nats_tls_cert_file: str = Field("", description="client certificate for TLS (mutual TLS; with the key file)")
    nats_tls_key_file: str = Field("", description="client private key for TLS (with the certificate file)")
    database_url: str = Field(f"sqlite+aiosqlite:///{DEFAULT_DB_PATH}", description="SQLAlchemy URL")
    database_allow_foreign_tables: bool = Field(
        False, description="migrate even into a database that holds other applications' tables (refused by default)"
    )
    prefix: str = Field("turnstile", pattern=r"^[A-Za-z0-9_-]+$", description="subject prefix")
    provider: str = Field("scripted", description="scripted or openai")
    scripted_directives: bool = Field(
        False,
        description="let message text drive the scripted provider's test directives (/tool, /stall, /fail, /usage, "
        "/say; docs/scripted-provider.md); on in `make run` and the test suite, off for `turnstile run`",
    )

    # model provider
    openai_base_url: str = Field("https://api.openai.com/v1", description="OpenAI-compatible API base URL (provider `openai`)")
    openai_api_key: SecretStr = Field(SecretStr(""), description="API key for the OpenAI-compatible provider (never logged)")
    model: str = Field("scripted", description="model name passed to the provider")
    reasoning_effort: str = Field(
        "", description="reasoning effort sent to the provider (`low`, `medium`, `high`); empty: not sent, as many "
        "OpenAI-compatible servers refuse the field",
    )
    openai_stream: bool = Field(
        True, description="request streamed completions (`stream: true`); partial text is published on "
        "`<prefix>.stream.<platform>.<sid>` while the model writes",
    )
    context_window_tokens: int = Field(32_000, gt=0, description="context window; older turns are summarised beyond it (KS-21)")
    checkpoint_max_bytes: int | None = Field(
        None, gt=0,
        description="largest checkpoint a session publishes: a conversation whose snapshot would pass it is compacted "
        "like one past its context window (its oldest turns summarised, KS-21). Unset: the broker's max_payload less "
        "an eighth (room for one turn's items, the envelope and headers), which is also the most it can be",
    )
    system_prompt: str = Field("You are a helpful assistant.", description="the complete system prompt (turnstile never composes prompts)")
    provider_timeout_s: float = Field(60.0, gt=0, description="timeout of one provider call")
    provider_check: bool = Field(
        True,
        description="at start, before taking ownership, check the provider's settings (provider `openai`: a key is "
        "set and `GET <base URL>/models` answers and accepts it); a refusal exits with code 5",
    )
    provider_failure_reply: str = Field(
        "",
        description="when set, a turn that fails with a provider error sends the user this text as a reply "
        "(`seq` -1); empty: no reply, the failure is in `turn.ended` and a WARNING",
    )

    # control API
    max_request_bytes: int = Field(
        262_144, gt=0, description="larger control requests are refused `too_large` before they are decoded"
    )

    # inbound
    max_inbound_bytes: int = Field(262_144, gt=0, description="larger inbound payloads are dead-lettered")
    max_attachment_bytes: int = Field(
        196_608, ge=0,
        description="decoded bytes of one inline attachment (data_base64); a message with a larger one is "
        "dead-lettered (invalid_attachment)",
    )
    dlq_raw_max_bytes: int = Field(
        16_384, ge=0,
        description="raw bytes kept in a dead letter (fewer when it would not fit under the server's "
        "max_payload); the letter carries the whole payload's size, sha256 and stream sequence",
    )
    fetch_batch: int = Field(256, gt=0, le=10_000, description="inbound messages asked per pull request (at most the room left under TURNSTILE_MAX_INBOUND_IN_FLIGHT)")
    fetch_timeout_s: float = Field(1.0, gt=0, description="expiry of one inbound pull request (the next goes out when it ends; one the server has not ended 1 s past it is taken for lost)")
    max_inbound_in_flight: int = Field(
        512, gt=0,
        description="inbound messages fetched and not yet staged, acked and handed off (the fetch loop waits "
        "for room; bounds memory while recordings wait behind a deletion, and while a backlog over many sessions "
        "waits for TURNSTILE_MAX_SESSIONS_WITH_WORK)",
    )
    ack_wait_s: float = Field(30.0, gt=0, description="inbound consumer ack wait")
    max_deliver: int = Field(20, gt=0, description="inbound consumer max deliveries")
    consumer_name: str = Field("turnstile-inbound", description="durable inbound consumer name")

    # actors
    max_concurrent_turns: int = Field(256, gt=0, description="turns running at once across sessions")
    max_sessions_with_work: int = Field(
        256, gt=0,
        description="sessions with an inbound message queued or in hand at once; a staged message for another "
        "session waits (at most 5 s) for one to finish, holding the fetch loop: a backlog over many sessions never "
        "loads them all at once (bounds the memory peak)",
    )
    actor_idle_s: float = Field(300.0, gt=0, description="evict an idle session actor after this")
    max_loaded_sessions: int = Field(
        256, gt=0,
        description="sessions kept loaded (transcript in memory); past it the least recently used idle one is "
        "unloaded and restored from its last checkpoint on its next message",
    )
    sqlite_synchronous: Literal["NORMAL", "FULL"] = Field(
        "NORMAL",
        description="SQLite commits: NORMAL survives a killed process; FULL (an fsync per group commit, "
        "~20-25% fewer msg/s measured) also survives an OS crash or power loss, like nats.conf's sync_interval",
    )
    lazy_write_wait_s: float = Field(
        0.05, ge=0,
        description="the turn-started record change and inbox status marks wait at most this long for a staging or "
        "journal write to share its transaction instead of committing alone (0: never wait)",
    )
    gc_threshold: int = Field(
        5_000, ge=0,
        description="allocations between young-generation garbage collections in a served process; the older "
        "generations are collected as rarely whatever it is (CPython's default 700 costs ~40% more CPU per "
        "message with many sessions; 50000 stops the event loop ~25-35 ms per collection; 0 keeps the default)",
    )
    gc_idle_threshold: int = Field(
        300, ge=0,
        description="in a served process, once this many allocations have accumulated and the event loop has had "
        "nothing to do for 3 ms, a garbage collection runs then, by CPython's own choice of generation, so that "
        "TURNSTILE_GC_THRESHOLD's collections rarely land inside a message (0: never collect when idle)",
    )
    malloc_mmap_threshold: int = Field(
        4 * 1024 * 1024, ge=0, le=32 * 1024 * 1024,
        description="bytes from which glibc gives an allocation a mapping of its own, fixed in a served process "
        "(its trim threshold: twice this); glibc's own rule maps every checkpoint buffer of a growing session past "
        "128 kB afresh, a page fault per 4 kB (measured: 17% of the worker's CPU in a 1,500-message drain into one "
        "session); 0 keeps glibc's rule",
    )
    turn_retry_attempts: int = Field(
        6, gt=0, description="attempts at serving one staged message before it is dead-lettered (`<prefix>.dlq.turn`)"
    )
    turn_retry_max_backoff_s: float = Field(
        10.0, ge=0, description="longest wait between two attempts (the waits double from 0.5 s up to this)"
    )
    mid_turn_policy: str = Field("enqueue", pattern="^(enqueue|interrupt|reject)$", description="default for messages arriving mid-turn: enqueue, interrupt or reject")

    # operator HTTP endpoint (health, metrics, session inspector)
    http_host: str = Field("127.0.0.1", description="address the HTTP endpoint listens on (loopback by default)")
    http_port: int = Field(
        4380, ge=-1, le=65535, description="HTTP endpoint port; 0 picks a free port, -1 turns the endpoint off"
    )

    # logs
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "debug", "info", "warning", "error"] = Field(
        "INFO", description="level of turnstile's own log lines"
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one JSON object a line with ts, level, logger, message and, where known, "
        "session_id, turn_id, inbound_id",
    )
    log_library_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "debug", "info", "warning", "error"] = Field(
        "WARNING", description="level of third-party loggers (alembic, httpx, aiohttp, nats, faststream, sqlalchemy)"
    )

    # ownership
    lease_ttl_s: float = Field(
        5.0, gt=0, description="single-owner lease TTL; a standby takes over this long after the owner dies"
    )
    partitions: int = Field(
        1, ge=1, le=1024,
        description="inbound partitions (fixed when the inbound stream is created); above 1, several processes "
        "sharing one PostgreSQL each own a share of them (docs/protocol.md#partitioned-ownership)",
    )
    drain_timeout_s: float = Field(
        10.0, ge=0,
        description="on SIGTERM, how long running turns may finish; the rest stay staged and the next owner "
        "runs them (the lease is released when draining ends)",
    )
    connect_timeout_s: float = Field(
        60.0, gt=0,
        description="at start, how long to retry reaching the broker, and its JetStream set-up requests while it cannot answer (a cluster electing leaders), before exiting with code 4",
    )

    # streams
    inbound_max_age_s: float = Field(7 * 24 * 3600, gt=0, description="inbound stream max age")
    events_max_age_s: float = Field(30 * 24 * 3600, gt=0, description="events stream max age")
    outbound_max_age_s: float = Field(7 * 24 * 3600, gt=0, description="outbound stream max age")
    duplicate_window_s: float = Field(120.0, gt=0, description="JetStream duplicate window (inbound, outbound)")
    checkpoints_per_session: int = Field(
        2, gt=0,
        description="complete checkpoints kept per session subject for replay (the last restores; live "
        "subscribers see every one; the journal and the events stream keep the whole history)",
    )
    stream_replicas: int = Field(
        1, gt=0,
        description="stream replicas (cluster deployments); with 1 checkpoints are read back with a direct get, "
        "with more through the API's get, which the stream's leader answers",
    )

    # tools (docs/agent-developers.md)
    tool_modules: list[str] = Field(
        default_factory=list,
        description="Python modules whose TOOLS attribute lists custom tools (JSON list); installed "
        "`turnstile.tools` entry points are loaded too",
    )
    tool_timeout_s: float = Field(30.0, gt=0, description="time limit of a custom or MCP tool that sets none of its own")
    mcp_servers_json: str = Field(
        "",
        description="JSON list of MCP tool servers, each {name, command, args?, env?, cwd? or url, headers?; "
        "modes?, timeout_s?, idempotent?}; their tools are registered as `<name>__<tool>`",
    )

    # identities / platforms
    time_zone: str = Field("UTC", description="time zone for rendered labels (IANA name)")
    owners: list[str] = Field(default_factory=list, description='owner identities "platform:user_id"')
    platforms_json: str = Field("", description="JSON list of adapter instances (see docs/protocol.md)")


def secret_value(value: SecretStr | str) -> str:
    """The plain text of a secret setting (a ``str`` given through ``model_copy`` is taken as is)."""
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def service_time_zone(name: str) -> tzinfo:
    """The service time zone labels are rendered in; an unknown name falls back to UTC (logged)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("unknown time zone %r; rendering labels in UTC", name)
        return ZoneInfo("UTC")


def settings_markdown() -> str:
    """The settings as a Markdown table (kept in docs/protocol.md; a test checks it is complete)."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = "[]" if field.default_factory is not None else repr(field.default).replace("'", "`")
        if default == "``" or name == "openai_api_key" or isinstance(field.default, SecretStr):
            default = "(empty)"
        rows.append(f"| `TURNSTILE_{name.upper()}` | {default} | {field.description or ''} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_markdown())

"""Service settings, read once at start-up from ``TURNSTILE_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DB_PATH = Path("var") / "turnstile.db"


class Settings(BaseSettings):
    """Everything configurable about one turnstile process."""

    model_config = SettingsConfigDict(env_prefix="TURNSTILE_", extra="ignore")

    nats_url: str = Field("nats://127.0.0.1:4333", description="NATS server URL")
    database_url: str = Field(f"sqlite+aiosqlite:///{DEFAULT_DB_PATH}", description="SQLAlchemy URL")
    prefix: str = Field("turnstile", pattern=r"^[A-Za-z0-9_-]+$", description="subject prefix")
    provider: str = Field("scripted", description="scripted | openai")

    # model provider
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str = ""
    model: str = "scripted"
    reasoning_effort: str = "medium"
    context_window_tokens: int = Field(32_000, gt=0)
    system_prompt: str = "You are a helpful assistant."
    provider_timeout_s: float = Field(60.0, gt=0)

    # inbound
    max_inbound_bytes: int = Field(262_144, gt=0, description="larger inbound payloads are dead-lettered")
    fetch_batch: int = Field(256, gt=0, le=10_000)
    fetch_timeout_s: float = Field(1.0, gt=0)
    ack_wait_s: float = Field(30.0, gt=0)
    max_deliver: int = Field(20, gt=0)
    consumer_name: str = "turnstile-inbound"

    # actors
    max_concurrent_turns: int = Field(256, gt=0)
    actor_idle_s: float = Field(300.0, gt=0, description="evict an idle session actor after this")
    mid_turn_policy: str = Field("enqueue", pattern="^(enqueue|interrupt|reject)$")

    # streams
    inbound_max_age_s: float = Field(7 * 24 * 3600, gt=0)
    events_max_age_s: float = Field(30 * 24 * 3600, gt=0)
    outbound_max_age_s: float = Field(7 * 24 * 3600, gt=0)
    duplicate_window_s: float = Field(120.0, gt=0)
    checkpoints_per_session: int = Field(64, gt=0)
    stream_replicas: int = Field(1, gt=0)

    # identities / platforms
    time_zone: str = "UTC"
    owners: list[str] = Field(default_factory=list, description='owner identities "platform:user_id"')
    platforms_json: str = Field("", description="JSON list of adapter instances (see docs/protocol.md)")

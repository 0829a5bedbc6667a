"""Soak sizes and durations: a profile (``ci`` or ``long``), each value overridable by an environment variable."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, fields, replace

PROFILES: dict[str, dict[str, float]] = {
    # `make test`: 20 sessions × 10 messages, 4 SIGKILLs, 2 deletions (about a minute on 2 cores).
    "ci": {"sessions": 20, "messages": 10, "kills": 4, "deletions": 2, "rate_per_s": 12.0, "drain_bound_s": 40.0},
    # `make test-soak`: the size, 50 sessions × 20 messages, 10 SIGKILLs.
    "long": {"sessions": 50, "messages": 20, "kills": 10, "deletions": 5, "rate_per_s": 15.0, "drain_bound_s": 90.0},
}


@dataclass(frozen=True)
class SoakConfig:
    """One soak run. Every field is read from ``TURNSTILE_SOAK_<FIELD>`` when set (e.g. ``TURNSTILE_SOAK_KILLS``)."""

    seed: int
    sessions: int
    messages: int
    kills: int
    deletions: int
    rate_per_s: float  # inbound publishes per second, all sessions together
    drain_bound_s: float  # clause 4: everything is accounted for this long after the last fault
    duplicate_window_s: float = 1.5  # TURNSTILE_DUPLICATE_WINDOW_S of the service (restart delays reach 3×)
    lease_ttl_s: float = 1.5
    ack_wait_s: float = 10.0  # longer than any restart, so an unstaged message comes back after newer ones
    database: str = "sqlite"  # or "postgres" (needs 127.0.0.1:5432)
    stall_fraction: float = 0.2  # messages whose model call stalls (``/stall``), so kills land mid-turn
    stall_max_s: float = 1.0
    tool_fraction: float = 0.1  # messages whose turn runs a journaled tool call first
    kill_triggers: str = "timer,after_reply,after_publish"  # what a kill waits for (tests/soak/plan.py)

    @property
    def total_messages(self) -> int:
        return self.sessions * self.messages

    @property
    def publish_s(self) -> float:
        return self.total_messages / self.rate_per_s

    @property
    def max_restart_delay_s(self) -> float:
        return 3 * self.duplicate_window_s

    @classmethod
    def from_env(cls, profile: str = "ci") -> SoakConfig:
        profile = os.environ.get("TURNSTILE_SOAK_PROFILE", profile)
        base = PROFILES[profile]
        seed_text = os.environ.get("TURNSTILE_SOAK_SEED")
        config = cls(
            seed=int(seed_text) if seed_text else random.SystemRandom().randrange(2**32),
            sessions=int(base["sessions"]),
            messages=int(base["messages"]),
            kills=int(base["kills"]),
            deletions=int(base["deletions"]),
            rate_per_s=base["rate_per_s"],
            drain_bound_s=base["drain_bound_s"],
        )
        for f in fields(cls):
            raw = os.environ.get(f"TURNSTILE_SOAK_{f.name.upper()}")
            if raw is not None and f.name != "seed":
                # Each field keeps its type: int, float or str from the environment's text.
                config = replace(config, **{f.name: type(getattr(config, f.name))(raw)})
        return config

    def describe(self) -> str:
        return (
            f"seed={self.seed} (TURNSTILE_SOAK_SEED) sessions={self.sessions} messages={self.messages} "
            f"kills={self.kills} deletions={self.deletions} rate={self.rate_per_s}/s "
            f"window={self.duplicate_window_s}s stall={self.stall_fraction}×≤{self.stall_max_s}s "
            f"tool={self.tool_fraction} triggers={self.kill_triggers} db={self.database}"
        )

"""Bench profiles: how many sessions, messages and seconds each phase uses.

``quick`` is for development (under a minute); ``full`` is what ``make bench``
runs and what the README quotes (under ten minutes on a 2-core machine).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """Sizes of every phase; every loop in the bench is bounded by these counts and timeouts."""

    name: str
    session_counts: tuple[int, ...]
    drain_messages: int  # backlog per session count (at least one message per session)
    paced_rate_per_s: float
    paced_duration_s: float
    tools_session_counts: tuple[int, ...]  # where the two-tool-call turn is measured too
    baseline_for_tools: bool  # also run baseline A with the tools turn's publish shape
    turns20_sessions: int  # sessions driven through 20 turns for bytes/session
    restore_sessions: int  # cold sessions timed after a restart
    growth_turns: int  # turns of one long conversation (context recovery)
    growth_window_tokens: int
    growth_text_chars: int
    reply_timeout_s: float  # per phase: give up waiting for missing replies after this
    langgraph_concurrency: int = 16

    def drain_count(self, sessions: int) -> int:
        return max(self.drain_messages, sessions)

    def paced_count(self) -> int:
        return int(self.paced_rate_per_s * self.paced_duration_s)


PROFILES = {
    "quick": Profile(
        name="quick",
        session_counts=(1, 100, 1000),
        drain_messages=600,
        paced_rate_per_s=200.0,
        paced_duration_s=2.0,
        tools_session_counts=(100,),
        baseline_for_tools=False,
        turns20_sessions=10,
        restore_sessions=5,
        growth_turns=30,
        growth_window_tokens=1500,
        growth_text_chars=600,
        reply_timeout_s=30.0,
    ),
    "full": Profile(
        name="full",
        session_counts=(1, 100, 10_000),
        drain_messages=4000,
        paced_rate_per_s=200.0,
        paced_duration_s=10.0,
        tools_session_counts=(1, 100, 10_000),
        baseline_for_tools=True,
        turns20_sessions=50,
        restore_sessions=20,
        growth_turns=80,
        growth_window_tokens=2000,
        growth_text_chars=800,
        reply_timeout_s=120.0,
    ),
}

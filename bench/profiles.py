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
    drain_single_session: int  # backlog when there is one session: every message lengthens one conversation
    paced_rate_per_s: float  # below every worker's capacity, so paced latency is latency, not queueing
    paced_duration_s: float
    tools_session_counts: tuple[int, ...]  # where the two-tool-call turn is measured too
    baseline_for_tools: bool  # also run baseline A with the tools turn's publish shape
    turns20_sessions: int  # sessions driven through 20 turns for bytes/session
    restore_sessions: int  # cold sessions timed after a restart
    growth_turns: int  # turns of one long conversation (context recovery)
    growth_window_tokens: int
    growth_text_chars: int
    reply_timeout_s: float  # per phase: give up waiting for missing replies after this
    baseline_min_drain: int  # baseline A's backlog is at least this long (it drains fast)
    langgraph_concurrency: int = 16

    tools_drain_messages: int = 300  # the two-tool turn is ~3x slower; cap its backlog
    paced_short_s: float = 2.0  # paced duration for one session and for the tools turn (they saturate early)
    # Head-of-line phase (bench/hol.py): unrelated sessions' paced latency while a subtree is deleted.
    hol_children: int = 200  # children of the deleted root
    hol_sessions: int = 50  # unrelated sessions (the ones timed); a few msg/s each, so no session queues
    hol_subtree_every: int = 10  # every n-th paced message goes to a child of the subtree
    hol_min_s: float = 2.0  # paced traffic lasts at least this (the whole phase without deletion)
    hol_tail_s: float = 1.0  # and this long after the deletion replied
    hol_max_s: float = 30.0  # but never longer
    startup_runs: int = 3  # runs of each command in the startup phase (bench/startup.py), median reported

    def drain_count(self, sessions: int, turn: str = "plain") -> int:
        if sessions == 1:
            return self.drain_single_session
        if turn == "tools":
            return max(min(self.drain_messages, self.tools_drain_messages), min(sessions, self.tools_drain_messages))
        return max(self.drain_messages, sessions)

    def drain_timeout_s(self, count: int) -> float:
        """Wait for a backlog: the per-phase timeout plus 25 ms a message (bounded by the count)."""
        return self.reply_timeout_s + count * 0.025

    def paced_count(self, sessions: int = 0, turn: str = "plain") -> int:
        seconds = self.paced_short_s if sessions == 1 or turn == "tools" else self.paced_duration_s
        return int(self.paced_rate_per_s * min(seconds, self.paced_duration_s))


PROFILES = {
    "quick": Profile(
        name="quick",
        session_counts=(1, 10, 100),
        drain_messages=120,
        drain_single_session=60,
        paced_rate_per_s=50.0,
        paced_duration_s=1.0,
        tools_session_counts=(10,),
        baseline_for_tools=False,
        turns20_sessions=5,
        restore_sessions=3,
        growth_turns=24,
        growth_window_tokens=1000,
        growth_text_chars=600,
        reply_timeout_s=10.0,
        baseline_min_drain=500,
    ),
    "full": Profile(
        name="full",
        session_counts=(1, 100, 10_000),
        drain_messages=1500,
        drain_single_session=300,
        paced_rate_per_s=50.0,
        paced_duration_s=10.0,
        tools_session_counts=(100,),
        baseline_for_tools=True,
        turns20_sessions=50,
        restore_sessions=20,
        growth_turns=60,
        growth_window_tokens=2000,
        growth_text_chars=800,
        reply_timeout_s=60.0,
        baseline_min_drain=3000,
        hol_children=2500,
        hol_sessions=100,
        hol_min_s=8.0,
        hol_tail_s=2.0,
        hol_max_s=60.0,
        startup_runs=9,
    ),
}

"""The soak's schedule, drawn from one seeded ``random.Random``: publish order, kill moments, deletions."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.soak.config import SoakConfig


@dataclass(frozen=True)
class KillPlan:
    """SIGKILL ``at_s`` after the first publish, restart ``restart_delay_s`` later."""

    at_s: float
    restart_delay_s: float


@dataclass(frozen=True)
class DeletionPlan:
    """Delete session number ``session`` ``at_s`` after the first publish."""

    at_s: float
    session: int


@dataclass(frozen=True)
class SoakPlan:
    """``order[k]`` is the session of the k-th publish (each session's messages keep their own order)."""

    order: list[int]
    kills: list[KillPlan]
    deletions: list[DeletionPlan]


def make_plan(config: SoakConfig) -> SoakPlan:
    """The same seed gives the same plan (the moments a kill hits still vary with the machine's timing)."""
    rng = random.Random(config.seed)
    order = [s for s in range(config.sessions) for _ in range(config.messages)]
    rng.shuffle(order)
    span_s = config.publish_s
    kills = sorted(
        (KillPlan(rng.uniform(0.05, 0.9) * span_s, rng.uniform(0.0, config.max_restart_delay_s)) for _ in range(config.kills)),
        key=lambda k: k.at_s,
    )
    first_publish_s: dict[int, float] = {}
    for slot, s in enumerate(order):
        first_publish_s.setdefault(s, slot / config.rate_per_s)
    deletions: list[DeletionPlan] = []
    for at_s in sorted(rng.uniform(0.15, 0.85) * span_s for _ in range(config.deletions)):
        # A session that has had a message for a while, so it exists when the deletion comes.
        eligible = [s for s, t in first_publish_s.items() if t < at_s - 1.0 and s not in {d.session for d in deletions}]
        if eligible:
            deletions.append(DeletionPlan(at_s, rng.choice(sorted(eligible))))
    return SoakPlan(order, kills, deletions)

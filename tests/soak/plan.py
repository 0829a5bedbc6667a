"""The soak's schedule, drawn from one seeded ``random.Random``: publish order, kill moments, deletions."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.soak.config import SoakConfig

# What a kill waits for once its moment has come: nothing, the next reply stored (its message is not yet
# marked done), or the next publish acked (the service is fetching and staging it, not yet acked).
KILL_TRIGGERS = ("timer", "after_reply", "after_publish")


@dataclass(frozen=True)
class KillPlan:
    """SIGKILL ``at_s`` after the first publish (then on ``trigger``), restart ``restart_delay_s`` later."""

    at_s: float
    restart_delay_s: float
    trigger: str


@dataclass(frozen=True)
class DeletionPlan:
    """Delete session number ``session`` ``at_s`` after the first publish."""

    at_s: float
    session: int


@dataclass(frozen=True)
class SoakPlan:
    """``order[k]`` is the session of the k-th publish (each session's messages keep their own order);
    ``directives[k]`` the scripted-provider lines put before its text."""

    order: list[int]
    directives: list[str]
    kills: list[KillPlan]
    deletions: list[DeletionPlan]


def make_plan(config: SoakConfig) -> SoakPlan:
    """The same seed gives the same plan (the moments a kill hits still vary with the machine's timing)."""
    rng = random.Random(config.seed)
    order = [s for s in range(config.sessions) for _ in range(config.messages)]
    rng.shuffle(order)
    directives = [_directives(rng, config) for _ in order]
    triggers = [t for t in config.kill_triggers.split(",") if t]
    unknown = set(triggers) - set(KILL_TRIGGERS)
    if unknown or not triggers:
        raise ValueError(f"kill triggers must be among {KILL_TRIGGERS}, got {config.kill_triggers!r}")
    span_s = config.publish_s
    # Every trigger gets its share of the kills, in a random order.
    kill_triggers = (triggers * config.kills)[: config.kills]
    rng.shuffle(kill_triggers)
    moments = sorted(rng.uniform(0.05, 0.9) * span_s for _ in range(config.kills))
    kills = [KillPlan(at_s, rng.uniform(0.0, config.max_restart_delay_s), t) for at_s, t in zip(moments, kill_triggers, strict=True)]
    first_publish_s: dict[int, float] = {}
    for slot, s in enumerate(order):
        first_publish_s.setdefault(s, slot / config.rate_per_s)
    deletions: list[DeletionPlan] = []
    for at_s in sorted(rng.uniform(0.15, 0.85) * span_s for _ in range(config.deletions)):
        # A session that has had a message for a while, so it exists when the deletion comes.
        eligible = [s for s, t in first_publish_s.items() if t < at_s - 1.0 and s not in {d.session for d in deletions}]
        if eligible:
            deletions.append(DeletionPlan(at_s, rng.choice(sorted(eligible))))
    return SoakPlan(order, directives, kills, deletions)


def _directives(rng: random.Random, config: SoakConfig) -> str:
    lines = []
    if rng.random() < config.tool_fraction:
        lines.append('/tool knowledge_search {"query": "soak"}')
    if rng.random() < config.stall_fraction:
        lines.append(f"/stall {rng.uniform(0.05, config.stall_max_s):.2f}")
    return "".join(line + "\n" for line in lines)

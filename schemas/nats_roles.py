"""Least-privilege NATS permissions for turnstile's roles, derived from the subject names (docs/security.md).

Four roles, each a NATS user with its own reply-inbox prefix (``_INBOX.<user>``,
``TURNSTILE_NATS_INBOX_PREFIX``) so nobody can read another connection's replies:

- ``service``: the turnstile process. Publishes checkpoints, events, outbound, turn progress
  (``stream.>``) and dead letters; manages
  its own streams, the inbound consumer and the ownership-lease bucket through the JetStream API; answers
  the control API (``allow_responses``).
- ``adapter-<platform>``: a platform adapter. Publishes ``inbound.<platform>.>`` and reads
  ``outbound.<platform>.>`` (core subscription, or a JetStream consumer named ``<platform>`` filtered to
  it) and its turn progress ``stream.<platform>.>``; may register and unregister its adapter instance.
  Nothing else.
- ``observer``: reads events, checkpoints, replies and dead letters, replays them, and calls the read-only verbs.
- ``admin``: the observer plus every control verb (the mutating ones included) and inbound test messages.

``render_authorization`` writes them as a nats-server ``authorization`` block (``nats.conf``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.subjects import Subjects

READ_ONLY_VERBS: tuple[str, ...] = (
    "session.get", "session.list", "session.children", "session.generation", "take.check",
    "place.of", "place.get", "place.list", "workspace.list", "platform.list",
    "knowledge.get", "knowledge.list", "object.resolve", "answer.lookup",
    "session.state_versions", "session.state_at",
)
"""Control verbs that change nothing: the observer may call these and no others."""

ADAPTER_VERBS: tuple[str, ...] = ("platform.register", "platform.unregister")
"""Control verbs a platform adapter may call (its own instance's registration)."""


@dataclass(frozen=True)
class Role:
    """One NATS user's permissions: subjects it may publish to and subscribe to."""

    user: str
    summary: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responses_max: int = 0  # > 0: may answer requests it receives (allow_responses), this many replies each
    inbox_prefix: str = field(default="")

    def __post_init__(self) -> None:
        if not self.inbox_prefix:
            object.__setattr__(self, "inbox_prefix", inbox_prefix_of(self.user))


def inbox_prefix_of(user: str) -> str:
    """The reply-inbox prefix a user's connections use (``TURNSTILE_NATS_INBOX_PREFIX``)."""
    return f"_INBOX.{user}"


def _stream_admin(stream: str) -> list[str]:
    """JetStream API subjects that manage one stream and its consumers, and read its messages."""
    api = "$JS.API"
    return [
        f"{api}.STREAM.CREATE.{stream}", f"{api}.STREAM.UPDATE.{stream}", f"{api}.STREAM.INFO.{stream}",
        f"{api}.STREAM.PURGE.{stream}", f"{api}.STREAM.MSG.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}", f"{api}.DIRECT.GET.{stream}.>",
        f"{api}.CONSUMER.*.{stream}", f"{api}.CONSUMER.*.{stream}.>", f"{api}.CONSUMER.*.*.{stream}.>",
        f"$JS.ACK.{stream}.>",
    ]


def _stream_reader(stream: str) -> list[str]:
    """JetStream API subjects that read (replay) one stream through ephemeral consumers: no purge, no update."""
    api = "$JS.API"
    return [
        f"{api}.STREAM.INFO.{stream}", f"{api}.STREAM.MSG.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}", f"{api}.DIRECT.GET.{stream}.>",
        f"{api}.CONSUMER.CREATE.{stream}", f"{api}.CONSUMER.CREATE.{stream}.>",
        f"{api}.CONSUMER.INFO.{stream}.>", f"{api}.CONSUMER.DELETE.{stream}.>",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.>", f"$JS.ACK.{stream}.>",
    ]


def lease_bucket(subjects: Subjects) -> str:
    """The ownership-lease key-value bucket (consumers/lease.py)."""
    return f"{subjects.stream_prefix}_LEASES"


def partition_buckets(subjects: Subjects) -> list[str]:
    """The partition-lease and member-heartbeat buckets (consumers/ownership.py)."""
    return [f"{subjects.stream_prefix}_PARTITIONS", f"{subjects.stream_prefix}_PARTITIONS_MEMBERS"]


def service_role(subjects: Subjects, user: str = "turnstile-service") -> Role:
    buckets = [lease_bucket(subjects), *partition_buckets(subjects)]
    streams = [spec.name for spec in subjects.streams()] + [f"KV_{bucket}" for bucket in buckets]
    publish = [subjects.checkpoint_all, subjects.events_all, subjects.outbound_all, subjects.dlq_all,
               subjects.stream_all, "$JS.API.INFO", subjects.relay_all]
    for stream in streams:
        publish += _stream_admin(stream)
    publish += [f"$KV.{bucket}.>" for bucket in buckets]
    return Role(
        user, "the turnstile service", tuple(publish),
        # the MaxDeliver advisories of its inbound consumer (consumers/max_deliveries.py)
        # and control requests relayed to it as the owner of a session's partition (consumers/control_routing.py)
        (subjects.api_all, f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{subjects.inbound_stream}.>",
         f"{inbox_prefix_of(user)}.>", subjects.relay_all),
        # Two: nats-server counts a request once per matching subscription, and the service has two on
        # every verb (the verb's own and the ``api.>`` fallback's); one reply otherwise fails.
        responses_max=2,
    )


def adapter_role(subjects: Subjects, platform: str, user: str | None = None) -> Role:
    user = user or f"adapter-{platform}"
    outbound = subjects.outbound_stream
    mine = f"{subjects.prefix}.outbound.{platform}.>"
    publish = [
        f"{subjects.prefix}.inbound.{platform}.>",
        *(f"{subjects.prefix}.api.{verb}" for verb in ADAPTER_VERBS),
        # A durable JetStream consumer named after the platform, filtered to its outbound subjects.
        f"$JS.API.CONSUMER.CREATE.{outbound}.{platform}.{mine}",
        f"$JS.API.CONSUMER.INFO.{outbound}.{platform}",
        f"$JS.API.CONSUMER.MSG.NEXT.{outbound}.{platform}",
        f"$JS.ACK.{outbound}.{platform}.>",
    ]
    streamed = f"{subjects.prefix}.stream.{platform}.>"  # typing and partial text (core NATS, not stored)
    return Role(
        user, f"the {platform} platform adapter", tuple(publish), (mine, streamed, f"{inbox_prefix_of(user)}.>")
    )


def observer_role(subjects: Subjects, user: str = "observer") -> Role:
    publish = [f"{subjects.prefix}.api.{verb}" for verb in READ_ONLY_VERBS]
    for stream in (subjects.events_stream, subjects.checkpoint_stream, subjects.dlq_stream):
        publish += _stream_reader(stream)
    # Replies live: `turnstile tail` (a checkpoint already holds every reply's text).
    subscribe = (subjects.events_all, subjects.checkpoint_all, subjects.outbound_all, subjects.dlq_all,
                 f"{inbox_prefix_of(user)}.>")
    return Role(user, "an observer: events, checkpoints, replies, replay, read-only verbs", tuple(publish), subscribe)


def admin_role(subjects: Subjects, user: str = "admin") -> Role:
    observer = observer_role(subjects, user)
    reads = tuple(s for s in observer.publish if not s.startswith(f"{subjects.prefix}.api."))
    # Inbound too: an operator may send a test message (`turnstile send`) and watch its turn.
    return Role(user, "an operator: the observer plus every control verb and test messages",
                (subjects.api_all, subjects.inbound_all, *reads), observer.subscribe)


def dev_roles(subjects: Subjects, platforms: tuple[str, ...] = ("cli",)) -> tuple[Role, ...]:
    """The users ``make run``'s server knows: the service, one adapter per platform, observer, admin."""
    return (
        service_role(subjects),
        *(adapter_role(subjects, p) for p in platforms),
        observer_role(subjects),
        admin_role(subjects),
    )


def password_variable(user: str) -> str:
    """The environment variable nats.conf reads a user's password from (``$TURNSTILE_DEV_PW_<USER>``)."""
    return "TURNSTILE_DEV_PW_" + "".join(c if c.isalnum() else "_" for c in user).upper()


def _strings(values: tuple[str, ...], indent: str) -> str:
    return "[\n" + "".join(f'{indent}  "{v}"\n' for v in values) + f"{indent}]"


def render_user(role: Role, credential: str) -> str:
    """One entry of an ``authorization.users`` list; ``credential`` is e.g. ``password: $VAR`` or ``nkey: U…``."""
    pad = "        "
    responses = f"\n{pad}allow_responses: {{ max: {role.responses_max} }}" if role.responses_max else ""
    return (
        f"    # {role.user}: {role.summary}\n"
        f'    {{ user: "{role.user}", {credential}\n'
        f"      permissions: {{\n"
        f"{pad}publish: {{ allow: {_strings(role.publish, pad)} }}\n"
        f"{pad}subscribe: {{ allow: {_strings(role.subscribe, pad)} }}{responses}\n"
        f"      }}\n"
        f"    }}\n"
    )


def render_authorization(roles: tuple[Role, ...], credential: Callable[[Role], str] | None = None) -> str:
    """An ``authorization`` block; by default passwords come from the environment (``$TURNSTILE_DEV_PW_…``)."""
    given = credential or (lambda role: f"password: ${password_variable(role.user)}")
    users = "".join(render_user(role, given(role)) for role in roles)
    return f"authorization {{\n  users = [\n{users}  ]\n}}\n"


PRODUCTION_HEAD = """\
# Example nats-server configuration for turnstile in production (docs/security.md).
# Generated by `python -m schemas.nats_roles --production docs/nats-production.conf`.
# Each role is a user with a bcrypt password hash (`nats server passwd` prints one); replace every
# REPLACE_WITH_BCRYPT_HASH, add one adapter user per platform you run, and give clients TLS.
# With an operator/JWT set-up (nsc) put the same publish/subscribe lists on each user instead.
listen: 0.0.0.0:4222
tls {
  cert_file: "/etc/nats/server.pem"
  key_file: "/etc/nats/server-key.pem"
}
jetstream {
  store_dir: "/var/lib/nats"
  sync_interval: always
}
max_payload: 8MB
"""


def production_example(subjects: Subjects | None = None, platforms: tuple[str, ...] = ("telegram", "slack")) -> str:
    """docs/nats-production.conf: the roles with bcrypt-hash placeholders, TLS and a store."""
    roles = dev_roles(subjects or Subjects(), platforms)
    return PRODUCTION_HEAD + render_authorization(roles, lambda role: 'password: "REPLACE_WITH_BCRYPT_HASH"')


BEGIN_MARK = "# --- roles: generated by `python -m schemas.nats_roles` (do not edit by hand) ---\n"
END_MARK = "# --- end of roles ---\n"


def with_dev_authorization(conf: str, subjects: Subjects | None = None) -> str:
    """``conf`` with its generated roles block replaced (or appended) by the current one."""
    block = BEGIN_MARK + render_authorization(dev_roles(subjects or Subjects())) + END_MARK
    head, found, rest = conf.partition(BEGIN_MARK)
    if not found:
        return conf + ("" if conf.endswith("\n") else "\n") + block
    return head + block + rest.partition(END_MARK)[2]


def without_roles(conf: str) -> str:
    """``conf`` without its generated roles block (an open server: the benchmark's own clients)."""
    head, found, rest = conf.partition(BEGIN_MARK)
    return head + rest.partition(END_MARK)[2] if found else conf


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:2] == ["--production"]:
        Path(sys.argv[2]).write_text(production_example())
    else:
        target = Path(sys.argv[1] if len(sys.argv) > 1 else "nats.conf")
        target.write_text(with_dev_authorization(target.read_text()))

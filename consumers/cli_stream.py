"""``turnstile send``, ``tail`` and ``replay``: what flows on the subjects, as it flows."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
import typer

from consumers.cli_support import (
    EXIT_REFUSED,
    Cli,
    connected,
    describe,
    err,
    fail,
    out,
    request,
    result_of,
    run,
    until_stopped,
)
from consumers.cli_time import parse_since
from consumers.nats_flush import flush
from schemas.tokens import decode_sid, encode_sid

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

REPLY_GRACE_S = 0.3  # after turn.ended, replies still in flight on the other subject


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at if at is not None else time.time()))


def reply_line(reply: dict[str, Any]) -> str:
    """A reply as text: its text, then one line per object."""
    lines = [str(reply.get("text", ""))] if reply.get("text") else []
    for obj in reply.get("objects") or []:
        lines.append(f"[object {obj.get('object_id', '?')}: {obj.get('file_name', '')} {obj.get('media_type', '')}]")
    return "\n".join(lines)


def event_summary(event: dict[str, Any]) -> str:
    """One readable line's worth of an event's data."""
    kind, data = event.get("type", "?"), event.get("data") or {}
    if kind == "turn.ended":
        error = f" error={data.get('error')}" if data.get("error") else ""
        return f"outcome={data.get('outcome')} status={data.get('status')}{error}"
    if kind == "turn.started":
        return f"turn={data.get('turn_id')} mode={data.get('mode')}"
    if kind == "message.dropped":
        detail = f" ({data.get('detail')})" if data.get("detail") else ""
        return f"inbound={data.get('inbound_id')} reason={data.get('reason')}{detail}"
    if kind == "usage":
        return f"input={data.get('input')} output={data.get('output')}"
    if kind.startswith("session."):
        session = data.get("session") or {}
        change = f" change={data['change']}" if data.get("change") else ""
        return f"status={session.get('status')}{change}"
    return orjson.dumps(data).decode()


# -- send ----------------------------------------------------------------------------------


async def publish_inbound(cli: Cli, nc: Client, subject: str, payload: bytes, msg_id: str, timeout_s: float) -> None:
    """Publish an inbound message until its stream stores it. "No responders" while the inbound
    stream exists, or no ack (a publish in flight when its leader stepped down), is a cluster
    electing the stream's leader: sent again under the same ``Nats-Msg-Id`` (stored once) after
    0.25 s, 0.5 s, then every 1 s, for up to ``timeout_s``. No inbound stream at all is a one-line
    error: no service has set up this prefix on this server."""
    from nats.errors import TimeoutError as NatsTimeoutError
    from nats.js.errors import NoStreamResponseError, NotFoundError, ServiceUnavailableError
    from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_delay

    from consumers.backoff import tenacity_wait
    from consumers.publisher import RETRY_FIRST_WAIT_S, RETRY_MAX_WAIT_S

    js = nc.jetstream()
    stream = cli.subjects.inbound_stream

    async def stream_must_exist(_state: RetryCallState) -> None:
        try:
            await js.stream_info(stream)
        except (NatsTimeoutError, ServiceUnavailableError):
            return  # the stream (its leader answers this) is electing one
        except NotFoundError:
            fail(f"no stream stores {subject}: no turnstile service has set up prefix {cli.settings.prefix!r} "
                 f"on this server (it creates stream {stream} at start)")

    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((NoStreamResponseError, NatsTimeoutError)),
            wait=tenacity_wait(base_s=RETRY_FIRST_WAIT_S, max_s=RETRY_MAX_WAIT_S),
            stop=stop_after_delay(timeout_s), before_sleep=stream_must_exist, reraise=True,
        ):
            with attempt:
                await js.publish(subject, payload, headers={"Nats-Msg-Id": msg_id})
    except (NoStreamResponseError, NatsTimeoutError) as exc:
        fail(f"stream {stream} did not store {subject} within {timeout_s:g} s ({describe(exc)}: electing a leader?)")


async def _send(cli: Cli, platform: str, session_id: str, text: str, timeout_s: float) -> int:
    subjects = cli.subjects
    try:
        inbound_subject = subjects.inbound(platform, session_id)
    except ValueError as exc:
        fail(str(exc), EXIT_REFUSED)
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        queue.put_nowait(msg)

    async with connected(cli) as nc:
        outbound = await nc.subscribe(subjects.outbound(platform, session_id), cb=collect)
        events = await nc.subscribe(subjects.events_of(session_id), cb=collect)
        await flush(nc)
        msg_id = uuid.uuid4().hex
        body = {"id": msg_id, "session_id": session_id, "platform": platform, "text": text}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await publish_inbound(cli, nc, inbound_subject, orjson.dumps(body), msg_id, timeout_s)
        ended, replied = await _follow_turn(cli, queue, outbound.subject, msg_id, deadline, timeout_s)
        await outbound.unsubscribe()
        await events.unsubscribe()
    if cli.json:
        cli.emit(ended)
    outcome = ended["data"].get("outcome")
    if outcome == "error":
        fail(f"turn failed: {ended['data'].get('error')}")
    if outcome == "aborted":
        fail("turn aborted (the session was interrupted or deleted)")
    if not replied and not cli.json:
        err("(silent turn: no reply)")
    return 0


async def _follow_turn(
    cli: Cli, queue: asyncio.Queue[Msg], outbound_subject: str, msg_id: str, deadline: float, timeout_s: float,
) -> tuple[dict[str, Any], bool]:
    """Print the replies to ``msg_id`` as they arrive (``deadline``: the loop's clock) until its turn ends;
    its ``turn.ended`` event, once replies still in flight had ``REPLY_GRACE_S``, and whether any came."""
    loop = asyncio.get_running_loop()
    seen: set[tuple[Any, Any]] = set()
    ended: dict[str, Any] | None = None
    grace_until = 0.0
    while True:
        remaining = (deadline if ended is None else min(deadline, grace_until)) - loop.time()
        if remaining <= 0 and ended is None:
            fail(f"no end of the turn within {timeout_s:g} s (is the service running with prefix "
                 f"{cli.settings.prefix!r}?)")
        try:
            async with asyncio.timeout(max(remaining, 0.001)):  # not wait_for: it can lose a cancel (task_stop.py)
                msg = await queue.get()
        except TimeoutError:
            if ended is None:
                continue
            return ended, bool(seen)
        data = orjson.loads(msg.data)
        if msg.subject == outbound_subject:
            key = (data.get("turn_id"), data.get("seq"))
            if data.get("reply_to") == msg_id and key not in seen:
                seen.add(key)
                cli.emit(data, reply_line(data))
        elif (data.get("data") or {}).get("inbound_id") == msg_id and ended is None:
            if data.get("type") == "message.dropped":
                if cli.json:
                    cli.emit(data)
                detail = data["data"].get("detail")
                fail(f"message dropped: {data['data'].get('reason')}" + (f" ({detail})" if detail else ""))
            if data.get("type") == "turn.ended":
                ended = data
                grace_until = loop.time() + REPLY_GRACE_S


def send_command(
    ctx: typer.Context,
    text: str = typer.Argument(..., help="the message text"),
    session: str = typer.Option(..., "--session", "-s", help="session id"),
    platform: str = typer.Option("cli", help="platform name (no '.', '*', '>' or whitespace)"),
    timeout: float = typer.Option(30.0, help="seconds to wait for the turn to end"),
) -> None:
    """Publish one message and print every output of its turn (and the turn's error when it fails)."""
    cli: Cli = ctx.obj
    raise typer.Exit(run(cli, lambda c: _send(c, platform, session, text, timeout)))


# -- tail --------------------------------------------------------------------------------------


def _tail_line(subject: str, data: dict[str, Any], prefix: str) -> str:
    parts = subject.split(".")
    if subject.startswith(f"{prefix}.outbound."):
        sid = decode_sid(parts[-1]) or "_"
        return f"{_clock(None)} {sid} reply #{data.get('seq')} → {parts[-2]}: {reply_line(data)}"
    sid = data.get("session_id") or "_"
    return f"{_clock(data.get('at'))} {sid} {data.get('type')} {event_summary(data)}"


async def _tail(cli: Cli, session_id: str | None) -> int:
    subjects = cli.subjects
    if session_id is None:
        watched = [subjects.events_all, subjects.outbound_all]
    else:
        watched = [subjects.events_of(session_id), f"{subjects.prefix}.outbound.*.{encode_sid(session_id)}"]

    async def show(msg: Msg) -> None:
        try:
            data = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            return
        if cli.json:
            out(orjson.dumps({"subject": msg.subject, "data": data}).decode())
        else:
            out(_tail_line(msg.subject, data, subjects.prefix))

    lost = asyncio.Event()
    async with connected(cli, lost) as nc:
        for subject in watched:
            await nc.subscribe(subject, cb=show)
        await flush(nc)
        err(f"following {', '.join(watched)} (Ctrl-C stops)")
        await until_stopped(lost.wait())
        was_lost = lost.is_set()  # leaving the block closes the connection and sets it too
    if was_lost:
        fail(f"connection to NATS at {cli.settings.nats_url} lost")
    return 0


def tail_command(
    ctx: typer.Context,
    session: str | None = typer.Argument(None, metavar="[SESSION]", help="only this session (default: all)"),
) -> None:
    """Follow events and replies live until Ctrl-C."""
    cli: Cli = ctx.obj
    raise typer.Exit(run(cli, lambda c: _tail(c, session)))


# -- replay ------------------------------------------------------------------------------------


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--since") from None


async def _replay(cli: Cli, what: str, session_id: str, from_seq: int | None, since: datetime | None,
                  follow: bool) -> int:
    from consumers.replay import replay

    async with connected(cli) as nc:
        async def each() -> None:
            async for item in replay(nc.jetstream(), cli.subjects, session_id, what,  # type: ignore[arg-type]
                                     start_seq=from_seq, start_time=since, follow=follow):
                out(orjson.dumps({"seq": item.seq, "subject": item.subject, "data": item.data}).decode())

        if follow:
            await until_stopped(each())
        else:
            await each()
    return 0


async def _replay_state(cli: Cli, session_id: str, at: int | None) -> int:
    """Time travel (``session.state_versions`` / ``session.state_at``): the journaled steps, or the state at one."""
    async with connected(cli) as nc:
        if at is not None:
            out(orjson.dumps(await result_of(nc, cli, "session.state_at",
                                             {"session_id": session_id, "state_version": at})).decode())
            return 0
        cursor: str | None = None
        while True:
            body: dict[str, Any] = {"session_id": session_id, **({"cursor": cursor} if cursor else {})}
            reply = await request(nc, cli, "session.state_versions", body)
            if not reply.get("ok"):
                error = reply.get("error") or {}
                fail(f"session.state_versions: {error.get('code', 'error')}: {error.get('message', '')}", EXIT_REFUSED)
            for step in reply.get("result") or []:
                out(orjson.dumps(step).decode())
            cursor = reply.get("next_cursor")
            if cursor is None:
                return 0


def replay_command(
    ctx: typer.Context,
    what: str = typer.Argument(..., metavar="events|checkpoints|state", help="which stream, or the journal's states"),
    session: str = typer.Option(..., "--session", "-s", help="session id"),
    from_seq: int | None = typer.Option(None, "--from-seq", min=1, help="start at this stream sequence"),
    since: str | None = typer.Option(None, "--since", help="start at this time: ISO 8601 (naive = UTC) or 15m, 2h, 1d back"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing what arrives until Ctrl-C"),
    at: int | None = typer.Option(None, "--at", min=1, help="state: the complete snapshot at this state version"),
) -> None:
    """Print a session's events or checkpoints from JetStream, one JSON object a line; ``state``: the
    journaled steps of its current generation (state versions), or with ``--at N`` its snapshot at one."""
    cli: Cli = ctx.obj
    if what == "state":
        if from_seq is not None or since is not None or follow:
            raise typer.BadParameter("state takes --at N only (no --from-seq, --since, --follow)", param_hint="state")
        raise typer.Exit(run(cli, lambda c: _replay_state(c, session, at)))
    if at is not None:
        raise typer.BadParameter("--at is for replay state", param_hint="--at")
    if what not in ("events", "checkpoints"):
        raise typer.BadParameter(f"{what!r} is not events, checkpoints or state", param_hint="events|checkpoints|state")
    start = _since(since)
    if start is not None and from_seq is not None:
        raise typer.BadParameter("give --from-seq or --since, not both", param_hint="--since")
    raise typer.Exit(run(cli, lambda c: _replay(c, what, session, from_seq, start, follow)))

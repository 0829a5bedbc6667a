"""``turnstile sessions`` (the tree) and ``turnstile show SESSION`` (one session, readable)."""

from __future__ import annotations

import time
from typing import Any

import typer
from pydantic import TypeAdapter

from consumers.cli_support import Cli, connected, out, result_of, run
from schemas.control import PlaceOfOut, SessionOut, SessionStatus

_SESSIONS = TypeAdapter(list[SessionOut])


def tree_lines(sessions: list[SessionOut]) -> list[str]:
    """Roots first, each child indented under its parent: ``id  [status]  label``."""
    by_id = {s.id: s for s in sessions}
    children: dict[str | None, list[SessionOut]] = {}
    for s in sessions:
        parent = s.parent_id if s.parent_id in by_id else None
        children.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda r: (r.created_at, r.id)):
            title = f"  {s.title}" if s.title and s.title != s.label.en else ""
            lines.append(f"{'  ' * depth}{s.id}  [{s.status}]  {s.label.en}{title}")
            walk(s.id, depth + 1)

    walk(None, 0)
    return lines


async def _sessions(cli: Cli, status: str | None) -> int:
    body: dict[str, Any] = {"status": status} if status else {}
    async with connected(cli) as nc:
        sessions = _SESSIONS.validate_python(await result_of(nc, cli, "session.list", body))
    if cli.json:
        cli.emit([s.model_dump(mode="json") for s in sessions])
    elif sessions:
        out("\n".join(tree_lines(sessions)))
    else:
        out("(no sessions)")
    return 0


def sessions_command(
    ctx: typer.Context,
    status: str | None = typer.Option(None, help="only sessions with this status (active, waiting, completed, error, archived)"),
) -> None:
    """The session tree, with labels and status."""
    cli: Cli = ctx.obj
    if status is not None and status not in SessionStatus.__args__:  # type: ignore[attr-defined]
        raise typer.BadParameter(f"{status!r} is not one of {', '.join(SessionStatus.__args__)}",  # type: ignore[attr-defined]
                                 param_hint="--status")
    raise typer.Exit(run(cli, lambda c: _sessions(c, status)))


def _when(at: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at))) if at else "-"


def transcript_lines(projection: list[dict[str, Any]]) -> list[str]:
    """The model-visible transcript, one block per message."""
    lines = []
    for message in projection:
        role = message.get("role", "?")
        content = message.get("content")
        text = content if isinstance(content, str) else str(content or "")
        if text:
            lines.append(f"  {role}: {text}".replace("\n", "\n    "))
        for call in message.get("tool_calls") or []:
            lines.append(f"  {role} → tool {call.get('name')} {call.get('arguments')}")
    return lines


def show_lines(session: SessionOut, place: PlaceOfOut, checkpoint: Any) -> list[str]:
    lines = [
        f"session     {session.id}",
        f"label       {session.label.en}",
        f"status      {session.status} ({session.kind}, {session.room_class})",
    ]
    for name in ("title", "name", "parent_id", "origin_platform", "workspace", "current_dir", "result"):
        value = getattr(session, name)
        if value:
            lines.append(f"{name.replace('_', ' '):<12}{value}")
    if session.children:
        lines.append(f"children    {', '.join(session.children)}")
    where = f"{place.kind} {place.key}" + (f" ({place.place.label.en})" if place.place else "")
    lines.append(f"place       {where}")
    last = session.last_turn or {}
    if last:
        lines.append("last turn   " + ", ".join(
            f"{k}={_when(v) if k.endswith('_at') else v}" for k, v in last.items() if v is not None
        ))
    tokens = session.tokens or {}
    lines.append("tokens      " + (", ".join(f"{k} {v}" for k, v in tokens.items()) if tokens else "-"))
    lines.append(f"created     {_when(session.created_at)}   updated {_when(session.updated_at)}")
    if checkpoint is None:
        lines.append("checkpoint  none")
        return lines
    data = checkpoint.data
    lines.append(f"checkpoint  #{checkpoint.seq} {data.get('transition')} (state {data.get('state_version')}, "
                 f"generation {data.get('generation')}, {_when(data.get('at'))})")
    snapshot = data.get("snapshot") or {}
    lines.append(f"transcript  (engine status {snapshot.get('status', '?')})")
    lines += transcript_lines(snapshot.get("projection") or []) or ["  (empty)"]
    return lines


async def _show(cli: Cli, session_id: str) -> int:
    from consumers.replay import latest_checkpoint

    async with connected(cli) as nc:
        session = SessionOut.model_validate(await result_of(nc, cli, "session.get", {"session_id": session_id}))
        place = PlaceOfOut.model_validate(await result_of(nc, cli, "place.of", {"session_id": session_id}))
        checkpoint = await latest_checkpoint(nc.jetstream(), cli.subjects, session_id)
    if cli.json:
        cli.emit({
            "session": session.model_dump(mode="json"),
            "place": place.model_dump(mode="json"),
            "checkpoint": None if checkpoint is None else {"seq": checkpoint.seq, **checkpoint.data},
        })
    else:
        out("\n".join(show_lines(session, place, checkpoint)))
    return 0


def show_command(ctx: typer.Context, session: str = typer.Argument(..., metavar="SESSION")) -> None:
    """One session: record, place, last turn, tokens and the transcript from its last checkpoint."""
    cli: Cli = ctx.obj
    raise typer.Exit(run(cli, lambda c: _show(c, session)))

"""Logs of a real ``turnstile run``: JSON lines with the work's ids, a WARNING for a failed turn,
library noise at WARNING, and the optional reply a user gets when the provider fails."""

from __future__ import annotations

import contextvars
import io
import logging
import uuid
from pathlib import Path

import orjson
from nats.aio.client import Client

from consumers.logs import JsonFormatter, clear_log_context, log_context
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.lifecycle_procs import ConfiguredProcess

FALLBACK = "Sorry, I cannot answer right now."


async def test_json_lines_carry_session_and_turn_ids_and_a_failed_turn_warns_and_falls_back(
    settings: Settings, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    proc = ConfiguredProcess(
        settings, tmp_path / "service.log",
        TURNSTILE_LOG_FORMAT="json", TURNSTILE_PROVIDER_FAILURE_REPLY=FALLBACK,
    )
    sid = f"log-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    try:
        await proc.start()
        await proc.wait_ready(nc)
        failing = inbound(sid, "/fail model overloaded")
        await publish_inbound(nc, subjects, failing)
        await wait_for(lambda: "failed" in proc.log_text(), timeout_s=20, what="the failed turn's warning")
        await wait_for(lambda: replies.messages, timeout_s=20, what="the fallback reply")
        ok = inbound(sid, "hello")
        await publish_inbound(nc, subjects, ok)
        await wait_for(lambda: len(replies.messages) >= 2, timeout_s=20, what="the next reply")
    finally:
        await proc.stop()
    lines = [orjson.loads(line) for line in proc.log_text().splitlines() if line.strip()]  # every line is JSON
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    warnings = [line for line in lines if line["level"] == "WARNING" and "failed" in line["message"]]
    assert len(warnings) == 1, lines
    warning = warnings[0]
    assert warning["session_id"] == sid and warning["inbound_id"] == failing["id"]
    assert warning["turn_id"] and warning["turn_id"] in warning["message"]
    assert "provider_error" in warning["message"] and "model overloaded" in warning["message"]
    # Library noise (alembic's migration chatter) stays below WARNING by default.
    assert not [line for line in lines if line["logger"].startswith("alembic")], lines
    fallback, answer = replies.json()
    assert fallback["text"] == FALLBACK and fallback["reply_to"] == failing["id"] and fallback["seq"] == -1
    assert answer["reply_to"] == ok["id"]


def test_the_json_formatter_writes_one_object_a_line_with_the_ids_set() -> None:
    contextvars.copy_context().run(_format_two_lines)


def _format_two_lines() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("turnstile.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        log_context(session_id="s1", turn_id="turn_1", inbound_id="m1")
        logger.warning("two\nlines %s", "here")
        clear_log_context()
        logger.warning("no turn")
    finally:
        logger.removeHandler(handler)
    first, second = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "two\nlines here"
    assert (first["session_id"], first["turn_id"], first["inbound_id"]) == ("s1", "turn_1", "m1")
    assert second["session_id"] == "s1" and "turn_id" not in second and "inbound_id" not in second

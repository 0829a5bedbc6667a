"""MQ-7: `make run` starts nats-server and the service; a hand-published message is answered; Ctrl-C stops both."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from consumers.nats_server import free_port, port_in_use
from tests.integration.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.rule("MQ-7")
@pytest.mark.timeout(120)
async def test_make_run_answers_a_hand_published_message_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}
    env.update(
        TURNSTILE_DEV_NATS_PORT=str(port),
        TURNSTILE_DEV_STORE_DIR=str(tmp_path / "nats"),
        TURNSTILE_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'run.db'}",
        TURNSTILE_HTTP_PORT="0",  # the default 4380 may be taken by another run on this machine
    )
    log = tmp_path / "make-run.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            "make", "--no-print-directory", "run", cwd=ROOT, env=env, stdout=out, stderr=out,
            start_new_session=True,
        )
    try:
        await wait_for(lambda: "ready on" in log.read_text(), timeout_s=60, what="make run to be ready")
        sid = f"hand-{uuid.uuid4().hex[:6]}"
        send_env = dict(env, TURNSTILE_NATS_URL=f"nats://127.0.0.1:{port}")
        sender = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "consumers.cli", "send", "--session", sid, "hello by hand",
            cwd=ROOT, env=send_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(sender.communicate(), 60)
        assert sender.returncode == 0, stderr.decode()
        assert stdout.decode().strip() == "echo: hello by hand"
        # README's quick start: the CLI finds the development credentials of its role by itself.
        lookup = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "consumers.cli", "api", "session.get", f'{{"session_id": "{sid}"}}',
            cwd=ROOT, env=send_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(lookup.communicate(), 60)
        assert lookup.returncode == 0, stderr.decode()
        # A second `make run` on the same store (another port) or the same database is refused.
        for changes in ({"TURNSTILE_DEV_NATS_PORT": str(free_port())},
                        {"TURNSTILE_DEV_NATS_PORT": str(free_port()), "TURNSTILE_DEV_STORE_DIR": str(tmp_path / "n2")}):
            second = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "consumers.devrun", cwd=ROOT, env=dict(env, **changes),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            _, stderr = await asyncio.wait_for(second.communicate(), 60)
            assert second.returncode == 2, stderr.decode()
            assert "in use by another running turnstile" in stderr.decode()
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches make and its children
            await asyncio.wait_for(proc.wait(), 30)
    await wait_for(lambda: not port_in_use(port), timeout_s=15, what="nats-server to stop")
    text = log.read_text()
    assert "stopped" in text, text[-2000:]
    assert "Traceback" not in text and "WARNING" not in text, text[-2000:]

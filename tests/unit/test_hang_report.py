"""tests/hang_report.py: a test that hangs on an ``await`` names that await before pytest-timeout fails it."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.hang_report import LEAD_S, report_tasks

ROOT = Path(__file__).resolve().parents[2]


async def _waits_for_ever(event: asyncio.Event) -> None:
    await event.wait()


async def test_the_report_names_each_pending_task_and_the_line_it_awaits() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_waits_for_ever(event), name="the-stuck-one")
    await asyncio.sleep(0)  # it reaches its await
    out = io.StringIO()
    try:
        printed = report_tasks("a test", out)
    finally:
        event.set()
        await task
    text = out.getvalue()
    assert printed >= 2  # this test's own task and the stuck one
    assert "--- a test:" in text
    assert "the-stuck-one: <coroutine object _waits_for_ever" in text
    assert "await event.wait()" in text  # the line it waits on


def test_a_hung_async_test_reports_its_awaits_before_it_times_out(tmp_path: Path) -> None:
    timeout = LEAD_S + 1
    (tmp_path / "conftest.py").write_text(
        "from tests.hang_report import tasks_reported_before_timeout  # noqa: F401\n"
    )
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(f"""
        import asyncio
        import pytest

        async def parked_here(event):
            await event.wait()

        @pytest.mark.timeout({timeout})
        async def test_hangs():
            await parked_here(asyncio.Event())
    """))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "-o", "asyncio_default_fixture_loop_scope=function", f"--rootdir={tmp_path}", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out  # failed: by the timeout
    assert "Timeout" in out, out
    assert f"still running {timeout - LEAD_S:.0f} s in (timeout {timeout:.0f} s)" in out, out
    assert "in parked_here\n    await event.wait()" in out, out  # the await that never returned, under the test's

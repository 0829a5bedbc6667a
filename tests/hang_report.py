"""What every asyncio task awaits, printed shortly before pytest-timeout fails a test.

pytest-timeout's traceback of a hung async test shows the event loop waiting in ``select``:
not which ``await`` never returned. ``tasks_reported_before_timeout`` (autouse in the
integration and fault suites) schedules ``report_tasks`` on the test's loop ``LEAD_S`` before
the test's timeout, so the failure's captured stderr names each task's coroutine and the line
it waits on. A test that ends in time cancels it; a loop blocked in a synchronous call never
runs it (then pytest-timeout's own traceback shows that call).
"""

from __future__ import annotations

import asyncio
import linecache
import sys
from collections.abc import AsyncIterator, Iterator
from types import FrameType
from typing import Any, TextIO

import pytest

LEAD_S = 5.0  # before the test's timeout: time for the report to be printed and the teardown to start
STACK_LIMIT = 30  # awaits followed per task, outermost first


def awaited_frames(coro: Any) -> Iterator[FrameType]:
    """The frames of a suspended coroutine and of each one it awaits in turn, outermost first.

    (``Task.print_stack`` shows only the task's own coroutine: the chain of ``await``s under it,
    which names the call that never returned, is followed here through ``cr_await``.)"""
    for _ in range(STACK_LIMIT):
        if coro is None:
            return
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            yield frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)


def report_tasks(what: str, out: TextIO | None = None) -> int:
    """Print every pending task of the running loop with the chain of awaits it is suspended in;
    the number of tasks printed."""
    out = out or sys.stderr
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    print(f"\n--- {what}: {len(tasks)} asyncio tasks pending ---", file=out)
    for task in tasks:
        print(f"{task.get_name()}: {task.get_coro()!r}", file=out)
        for frame in awaited_frames(task.get_coro()):
            code = frame.f_code
            line = linecache.getline(code.co_filename, frame.f_lineno).strip()
            print(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}\n    {line}', file=out)
    out.flush()
    return len(tasks)


def timeout_of(item: pytest.Item) -> float | None:
    """The item's pytest-timeout: its ``timeout`` marker, else ``--timeout``, else the ini value."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    option = item.config.getoption("timeout", None)
    if option:
        return float(option)
    ini = item.config.getini("timeout")
    return float(ini) if ini else None


@pytest.fixture(autouse=True)
async def tasks_reported_before_timeout(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    timeout = timeout_of(request.node)
    if not timeout or timeout <= LEAD_S:
        yield
        return
    what = f"{request.node.nodeid} still running {timeout - LEAD_S:.0f} s in (timeout {timeout:.0f} s)"
    handle = asyncio.get_running_loop().call_later(timeout - LEAD_S, report_tasks, what)
    try:
        yield
    finally:
        handle.cancel()

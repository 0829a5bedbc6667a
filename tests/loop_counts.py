"""Counting what the running event loop makes (tasks, timers) while a block runs: hot-path tests pin
that a step needs none per message, load-independently (speed itself is measured in bench/)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any


class TaskCount:
    """Counts the tasks the running loop creates while installed."""

    def __init__(self) -> None:
        self.created = 0
        self._loop = asyncio.get_running_loop()
        self._previous = self._loop.get_task_factory()

    def __enter__(self) -> TaskCount:
        def factory(
            loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any], **kwargs: Any
        ) -> asyncio.Task[Any]:
            self.created += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        self._loop.set_task_factory(factory)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.set_task_factory(self._previous)


class TimerCount:
    """Counts the timers (``loop.call_at``, which ``call_later`` and ``asyncio.timeout`` use) armed while installed."""

    def __init__(self) -> None:
        self.armed = 0
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> TimerCount:
        original = self._loop.call_at

        def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            self.armed += 1
            return original(when, callback, *args, **kwargs)

        self._loop.call_at = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self._loop.call_at  # the class's method again

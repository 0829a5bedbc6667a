"""A headless Chromium driven over the Chrome DevTools Protocol, for tests of the inspector page.

No driver package: Chromium starts with ``--remote-debugging-port=0`` and writes the port it
chose to ``DevToolsActivePort`` in its profile directory; the page target's WebSocket speaks
CDP (JSON commands with ids) through aiohttp's client, which the service depends on anyway.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

WIDTH_PX, HEIGHT_PX = 1440, 860
START_TIMEOUT_S = 30.0


def chromium_path() -> str | None:
    """``TURNSTILE_CHROMIUM`` or Debian's ``chromium`` on PATH (``make browser`` installs it)."""
    return os.environ.get("TURNSTILE_CHROMIUM") or shutil.which("chromium")


class CdpError(Exception):
    """Raised when Chromium answers a command with an error or a page script throws."""


class Page:
    """One page target: send commands, evaluate JavaScript, take screenshots."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        command_id = next(self._ids)
        await self._ws.send_json({"id": command_id, "method": method, "params": params})
        while True:  # events arrive between answers; only ours matters
            message = await self._ws.receive_json()
            if message.get("id") != command_id:
                continue
            if "error" in message:
                raise CdpError(f"{method}: {message['error']}")
            result: dict[str, Any] = message.get("result", {})
            return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise CdpError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def wait_for(self, expression: str, *, what: str, timeout_s: float = 20.0) -> Any:
        """Poll ``expression`` until it is truthy (a deadline, no fixed sleep); its value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = await self.evaluate(expression)
            if last:
                return last
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last value {last!r})")

    async def screenshot(self, *paths: Path) -> bytes:
        png = base64.b64decode((await self.send("Page.captureScreenshot", format="png"))["data"])
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        return png


@asynccontextmanager
async def headless_chromium(executable: str) -> AsyncIterator[Page]:
    """Start Chromium headless with a throwaway profile; yield its first page; kill it after."""
    with tempfile.TemporaryDirectory(prefix="turnstile-chromium-") as profile, \
            open(Path(profile) / "stderr.log", "wb") as log:  # noqa: ASYNC230 (creates the empty file chromium's stderr goes to: a full pipe would block it)
        process = subprocess.Popen(  # noqa: ASYNC220 (starts chromium and returns; its own session, killed by group and polled below)
            [
                executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={profile}", f"--window-size={WIDTH_PX},{HEIGHT_PX}", "about:blank",
            ],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )
        try:
            port = await _devtools_port(Path(profile), process)
            async with aiohttp.ClientSession() as http:
                targets = await (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
                page_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
                async with http.ws_connect(page_url, max_msg_size=0) as ws:
                    page = Page(ws)
                    await page.send("Page.enable")
                    await page.send("Emulation.setDeviceMetricsOverride", width=WIDTH_PX, height=HEIGHT_PX,
                                    deviceScaleFactor=1, mobile=False)
                    yield page
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the renderer and GPU helpers go too
            process.wait()


async def _devtools_port(profile: Path, process: subprocess.Popen[bytes]) -> int:
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = (profile / "stderr.log").read_text(errors="replace")
            raise CdpError(f"chromium exited with {process.returncode}: {err[-2000:]}")
        text = active.read_text() if active.exists() else ""
        if text.strip():
            return int(text.splitlines()[0])
        await asyncio.sleep(0.05)
    raise CdpError(f"chromium did not open its DevTools port within {START_TIMEOUT_S}s")

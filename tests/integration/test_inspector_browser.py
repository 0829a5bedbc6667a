"""The inspector page in a real headless Chromium against a running service (screenshot in var/).

``TURNSTILE_UPDATE_DOCS_SCREENSHOT=1`` (``make screenshot``) also writes ``docs/inspector.png``,
the README's picture; a plain test run leaves the tracked file alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.browser import Page, chromium_path, headless_chromium
from tests.integration.harness import Collector, api, inbound, publish_inbound
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = chromium_path()
GROUP = "tg:group:42"  # the prefix is new for every test, so fixed ids do not collide
TEAM_CHAT = {"type": "group", "target_id": "42", "multi_party": True, "name": "Team"}
HOSTILE = '<img src=x onerror="window.__xss=1">'

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed and could not be installed (`make browser` installs Debian's chromium)",
)


async def _turn(service: TurnstileService, nc: Client, replies: Collector, sid: str, text: str, **extra: object) -> None:
    seen = len(replies.messages)
    await publish_inbound(nc, service.subjects, inbound(sid, text, platform="telegram", **extra))
    await wait_for(lambda: len(replies.messages) > seen, what=f"the reply in {sid}")
    assert service.actors is not None
    await service.actors.join(timeout_s=10)


def _text(page_selector: str) -> str:
    return f"[...document.querySelectorAll({json.dumps(page_selector)})].map(n => n.textContent).join('\\n')"


async def test_the_page_shows_the_session_tree_its_transcript_with_a_tool_call_and_live_events(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    assert CHROMIUM is not None
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.telegram.>")
    sender = {"user_id": "u7", "name": "Ann"}
    await _turn(service, nc, replies, GROUP,
                '/tool knowledge_search {"query": "team offsite"}\nWhere did we land on the offsite?',
                chat=TEAM_CHAT, sender=sender)
    child = await api(nc, subjects, "session", "create_child", {"parent_id": GROUP, "fields": {"name": "Book the venue"}})
    assert child["ok"], child
    await _turn(service, nc, replies, "tg:dm:7", "hi there",
                chat={"type": "private", "target_id": "7", "multi_party": False, "name": "Bob"},
                sender={"user_id": "7", "name": "Bob"})

    async with headless_chromium(CHROMIUM) as page:
        await page.navigate(f"{service.http.url}/inspector/#session={quote(GROUP, safe='')}")
        await _shows_the_session(page, child["result"]["id"])
        await page.wait_for("document.getElementById('live-state').textContent === 'streaming'",
                            what="the live stream to open")

        # Live: a turn that runs while the page is open shows up without a reload, escaped.
        await _turn(service, nc, replies, GROUP,
                    f'/tool knowledge_search {{"query": "venue"}}\nand one more thing {HOSTILE}',
                    chat=TEAM_CHAT, sender=sender)
        await page.wait_for(f"{_text('#live li')}.includes('turn.ended · replied')", what="turn.ended on the page")
        await page.wait_for(f"{_text('#transcript .msg.user .text')}.includes({json.dumps(HOSTILE)})",
                            what="the new message in the transcript, as text")
        assert await page.evaluate("document.querySelectorAll('#transcript img').length") == 0
        assert await page.evaluate("window.__xss === undefined")

        # Any checkpoint is viewable: one the stream keeps (read by sequence) and one it no longer
        # keeps (seen live: the tool turn published six, the stream keeps two).
        await page.wait_for("document.querySelectorAll('#timeline tr.live-row').length >= 3", what="live-only rows")
        for row in ("#timeline tr.clickable:not(.live-row)", "#timeline tr.live-row"):
            await page.evaluate(f"document.querySelector({json.dumps(row)}).click()")
            viewed = await page.wait_for(
                "!document.getElementById('viewer').hidden && document.getElementById('viewer-body').textContent"
                ".includes('\"snapshot\"') && document.getElementById('viewer-body').textContent",
                what=f"a checkpoint in the viewer ({row})",
            )
            assert f'"session_id": "{GROUP}"' in viewed
            await page.evaluate("document.getElementById('viewer-close').click()")

        # Search by session id narrows the tree; clearing the search brings every session back.
        await _search(page, "DM:7")
        await page.wait_for("[...document.querySelectorAll('#tree .tree-row')].map(r => r.dataset.sessionId)"
                            ".join() === 'tg:dm:7'", what="the tree narrowed to tg:dm:7")
        await _search(page, "")
        await page.wait_for("document.querySelectorAll('#tree .tree-row').length === 3", what="the whole tree again")

        shots = [REPO / "var" / "inspector.png"]
        if os.environ.get("TURNSTILE_UPDATE_DOCS_SCREENSHOT") == "1":
            shots.append(REPO / "docs" / "inspector.png")
        png = await page.screenshot(*shots)
    assert png.startswith(b"\x89PNG") and (REPO / "var" / "inspector.png").stat().st_size > 10_000


async def _search(page: Page, text: str) -> None:
    await page.evaluate(
        f"(() => {{ const i = document.getElementById('search-input'); i.value = {json.dumps(text)};"
        " i.dispatchEvent(new Event('input')); })()"
    )


async def _shows_the_session(page: Page, child_id: str) -> None:
    tree = await page.wait_for(
        f"document.querySelectorAll('#tree .tree-row').length >= 3 && {_text('#tree .tree-row')}",
        what="the session tree",
    )
    assert GROUP in tree and "tg:dm:7" in tree and child_id in tree
    assert "Book the venue" in tree and "task" in tree and "room" in tree
    # The child is drawn under its parent.
    assert await page.evaluate(
        f"!!document.querySelector('#tree li > ul [data-session-id={json.dumps(child_id)}]')"
    )
    assert await page.evaluate(
        f"document.querySelector('#tree .tree-row.selected')?.dataset.sessionId === {json.dumps(GROUP)}"
    )

    call = await page.wait_for(
        f"document.querySelector('#transcript .tool-call[data-tool=\"knowledge_search\"]') && "
        f"{_text('#transcript .tool-call')}",
        what="the tool call in the transcript",
    )
    assert '"query": "team offsite"' in call
    result = await page.evaluate(_text("#transcript .tool-result[data-tool='knowledge_search']"))
    assert "knowledge_search" in result
    user = await page.evaluate(_text("#transcript .msg.user .text"))
    assert "Where did we land on the offsite?" in user
    assistant = await page.evaluate(_text("#transcript .msg.assistant .text"))
    assert "echo: Where did we land on the offsite?" in assistant
    rows = await page.wait_for("document.querySelectorAll('#timeline tr.clickable').length", what="the timeline")
    assert rows >= 1
    assert "turn_ended" in await page.evaluate(_text("#timeline tr.clickable"))

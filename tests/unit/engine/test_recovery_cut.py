"""Context recovery's cut (KS-21) on long transcripts: the same cut as rendering every suffix,
found without rendering any of them and without memoising throwaway slices.

A conversation of short messages reaches the window only after thousands of items; choosing the
cut by projecting and rendering ``transcript[index:]`` per user-message boundary was O(items²)
and built a ``TranscriptMemo`` per slice, which the memo cache kept: the turn that first crossed
the default 32,000-token window blocked the event loop ~28 s and peaked at ~3 GB (bench/README.md).
"""

from __future__ import annotations

import pytest

from core.engine import RuntimeModel, chatend
from core.engine.chatend import memo_for, project_transcript, render_messages
from core.engine.recovery import KEEP_FRACTION, choose_cut
from core.engine.state import TranscriptItem
from core.providers.base import estimate_tokens

from .conftest import PROMPT, Recorder, SessionFactory

TURN_TEXTS = (
    "short",
    '/tool knowledge_search {"query": "tools and their results"}',
    "a longer message " + "x" * 120,
    '/tool reply {"text": "first"}\n/say second',
)


def reference_cut(system_prompt: str, transcript: list[TranscriptItem], window_tokens: int, protect_from: int) -> int:
    """The cut by definition: the first user-message boundary whose rendered rest fits half the window."""
    boundaries = [i for i, item in enumerate(transcript) if 0 < i <= protect_from and item["kind"] == "user_message"]
    if not boundaries:
        return 0
    target = int(window_tokens * KEEP_FRACTION) - estimate_tokens(system_prompt)
    for index in boundaries:
        if estimate_tokens(render_messages(project_transcript(transcript[index:]))) <= target:
            return index
    return boundaries[-1]


async def _conversation(make_session: SessionFactory, turns: int) -> list[TranscriptItem]:
    """A transcript of every kind a turn writes: user messages, answers, tool calls and results."""
    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=10_000_000))
    for turn in range(turns):
        text = TURN_TEXTS[turn % len(TURN_TEXTS)]
        await session.begin_user_turn(text if text.startswith("/") else f"{turn}: {text}")
        await session.run_pending_turn(f"op-{turn}", Recorder())
    return session.transcript


@pytest.mark.rule("KS-21")
async def test_the_cut_is_the_first_boundary_whose_rendered_rest_fits_half_the_window(make_session: SessionFactory) -> None:
    # KS-21: summarise the oldest whole turns; keep the newest items within half the window
    transcript = await _conversation(make_session, 40)
    kinds = {item["kind"] for item in transcript}
    assert {"user_message", "agent_message", "tool_result"} <= kinds, kinds
    full = estimate_tokens(render_messages(project_transcript(transcript)))
    cuts = set()
    for window in (10, 50, 200, full // 2, full, 2 * full, 3 * full):
        for protect_from in (len(transcript) - 1, len(transcript) // 2, 1, 0):
            got = choose_cut(PROMPT, transcript, window, protect_from)
            assert got == reference_cut(PROMPT, transcript, window, protect_from), (window, protect_from)
            cuts.add(got)
    assert len(cuts) > 3, "the windows exercise cuts at many boundaries, and none"


async def test_choosing_a_cut_renders_nothing_again_and_memoises_no_slice(
    make_session: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    transcript = await _conversation(make_session, 200)
    memo_for(transcript)  # the live transcript's memo, as a turn leaves it
    rendered = 0
    render_block = chatend._render_block

    def counting(msg: dict[str, object]) -> str:
        nonlocal rendered
        rendered += 1
        return render_block(msg)

    monkeypatch.setattr(chatend, "_render_block", counting)
    memos = set(chatend._memos)
    full = estimate_tokens(render_messages(project_transcript(transcript)))
    rendered = 0
    cut = choose_cut(PROMPT, transcript, full // 4, len(transcript) - 1)
    assert cut > len(transcript) // 2  # late: O(items) suffixes before it
    assert rendered == 0, f"choose_cut rendered {rendered} blocks for a transcript of {len(transcript)} items"
    assert set(chatend._memos) == memos, "a slice's memo was built and kept"


async def test_a_summary_leaves_no_memo_of_the_transcript_it_replaced(make_session: SessionFactory) -> None:
    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=400))
    replaced: list[int] = []
    for turn in range(12):
        before = session.transcript
        await session.begin_user_turn(f"turn {turn}: " + "w" * 200)
        await session.run_pending_turn(f"op-{turn}", Recorder())
        if session.transcript[0]["kind"] == "summary" and session.transcript is not before:
            replaced.append(id(before))
    assert replaced, "the window made at least one summary"
    assert not set(replaced) & set(chatend._memos), "a replaced transcript's memo (and the transcript) stayed cached"


@pytest.mark.rule("KS-21")
@pytest.mark.parametrize("budget", [None, 40_000])
async def test_every_compaction_leaves_one_summary_heading_the_rest_in_order(
    make_session: SessionFactory, budget: int | None
) -> None:
    # KS-21: older transcript is compacted into the summary; a later compaction covers the earlier one
    window = 500 if budget is None else 10_000_000
    session = await make_session(runtime=RuntimeModel(model="m", context_window_tokens=window), snapshot_max_bytes=budget)
    compacted: set[int] = set()
    for turn in range(400):
        await session.begin_user_turn(f"hi {turn}")
        await session.run_pending_turn(f"op-{turn}", Recorder())
        transcript = session.transcript
        kinds = [item["kind"] for item in transcript]
        if "summary" in kinds:
            assert kinds.count("summary") == 1 and kinds[0] == "summary", (turn, kinds[:4])
            seqs = [item["seq"] for item in transcript[1:]]
            assert seqs == sorted(seqs), turn
            compacted.add(session.state.compacted_through_seq)
    assert len(compacted) > 2, "compacted several times"

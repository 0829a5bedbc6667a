"""The memoised projection equals the plain one while a transcript grows, shrinks or is replaced."""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson

from core.engine.chatend import (
    chatend_text,
    forget_memo,
    memo_chatend_chars,
    memo_for,
    project_messages,
    render_messages,
    transcript_chatend_text,
)


def _item(kind: str, **payload: Any) -> dict[str, Any]:
    return {"kind": kind, "payload": payload}


def _plain(system: str, transcript: list[dict[str, Any]]) -> str:
    text = f"[system]\n{system}\n\n" + render_messages(project_messages(list(transcript)))
    assert memo_chatend_chars(system, memo_for(transcript)) == len(text)  # the running size agrees
    return text


def test_memoised_chatend_matches_a_fresh_projection_through_growth_and_compaction() -> None:
    transcript: list[dict[str, Any]] = []
    for i in range(5):
        transcript.append(_item("user_message", text=f"q{i}"))
        transcript.append(_item("agent_message", text="", tool_calls=[{"id": f"c{i}", "name": "t", "arguments": {"i": i}}]))
        transcript.append(_item("tool_result", id=f"c{i}", content=f"r{i}"))
        transcript.append(_item("agent_message", text=f"a{i}"))
        assert transcript_chatend_text("sys", transcript) == _plain("sys", transcript)
        assert transcript_chatend_text("sys", transcript) == chatend_text("sys", project_messages(transcript))
    # Compaction replaces the head in place: the memo must notice the changed items.
    transcript[:8] = [_item("summary", text="earlier")]
    assert transcript_chatend_text("sys", transcript) == _plain("sys", transcript)
    del transcript[-1]
    assert transcript_chatend_text("sys", transcript) == _plain("sys", transcript)


def test_projections_share_the_memos_messages_in_a_fresh_list() -> None:
    # Copying every message per model call made a turn O(conversation): the messages are
    # read-only (like the transcript items), the list is the caller's.
    transcript = [_item("user_message", text="hi")]
    first, second = project_messages(transcript), project_messages(transcript)
    assert first == second == [{"role": "user", "content": "hi"}]
    assert first is not second and first[0] is second[0] is memo_for(transcript).messages[0]
    first.append({"role": "user", "content": "the caller's own"})
    assert project_messages(transcript) == second


def test_a_rewritten_head_of_the_same_length_is_noticed() -> None:
    transcript = [_item("user_message", text=f"q{i}") for i in range(4)]
    assert transcript_chatend_text("sys", transcript) == _plain("sys", transcript)
    transcript[:2] = [_item("summary", text="earlier"), _item("notice", code="x", text="kept")]
    assert transcript_chatend_text("sys", transcript) == _plain("sys", transcript)
    assert memo_for(transcript).content_chars == sum(len(m["content"]) for m in project_messages(list(transcript)))


def _joined(transcript: list[dict[str, Any]], system: str) -> tuple[bytes, bytes, bytes]:
    """What the snapshot encoder splices, computed from scratch."""
    from core.engine.chatend import memo_chatend_json

    memo = memo_for(transcript)
    return bytes(memo.transcript_json), bytes(memo.projection_json), memo_chatend_json(system, memo)


def _fresh(transcript: list[dict[str, Any]], system: str) -> tuple[bytes, bytes, bytes]:
    messages = project_messages(list(transcript))
    return (
        b",".join(orjson.dumps(item) for item in transcript),
        b",".join(orjson.dumps(m) for m in messages),
        orjson.dumps(chatend_text(system, messages)),
    )


def test_the_joined_encodings_equal_fresh_ones_byte_for_byte_through_growth_and_rewrites() -> None:
    # The checkpoint splices these (core/engine/snapshot.py): JSON escaping done per item must
    # give the bytes of escaping the whole text (quotes, backslashes, control and non-ASCII).
    system = 'sys "quoted" \\ back\tslash'
    transcript: list[dict[str, Any]] = []
    assert _joined(transcript, system) == _fresh(transcript, system)
    tricky = ['plain', 'a "quote"', "back\\slash", "new\nline\r\n", "tab\t\x01\x1f ctrl", "é ü 漢字 🎉", ""]
    for i, text in enumerate(tricky):
        transcript.append(_item("user_message", text=text))
        transcript.append(_item("agent_message", text=f"{text}!", tool_calls=[{"id": f"c{i}", "name": "t", "arguments": {"q": text}}]))
        transcript.append(_item("tool_call", id=f"c{i}"))  # projects to no message
        transcript.append(_item("tool_result", id=f"c{i}", content=text))
        assert _joined(transcript, system) == _fresh(transcript, system)
    transcript[:8] = [_item("summary", text='earlier "stuff"\n')]  # compaction rewrites the head
    assert _joined(transcript, system) == _fresh(transcript, system)
    del transcript[-3:]
    assert _joined(transcript, system) == _fresh(transcript, system)
    transcript.append(_item("notice", code="x", text="after\\the\"cut"))
    assert _joined(transcript, system) == _fresh(transcript, system)
    del transcript[:]
    assert _joined(transcript, system) == _fresh(transcript, system)


def test_a_memo_holds_its_encodings_at_their_length() -> None:
    # orjson's output carries its 4 KB write buffer; a loaded session's memo keeps an encoding per item.
    transcript = [_item("user_message", text=f"q{i}") for i in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        memo = memo_for(transcript)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    encoded = len(memo.transcript_json) + len(memo.projection_json) + len(memo.chatend_json)
    assert held < 10 * encoded, f"{held:,} B held for {encoded:,} B of JSON"
    forget_memo(transcript)


def test_the_chatend_length_is_the_texts_through_growth_and_rewrites() -> None:
    # Context recovery's check at every model round reads the length, not a newly built text.
    def transcript_chatend_length(system: str, transcript: list[dict[str, Any]]) -> int:
        return memo_chatend_chars(system, memo_for(transcript))

    transcript: list[dict[str, Any]] = []
    for system in ("sys", ""):
        assert transcript_chatend_length(system, transcript) == len(transcript_chatend_text(system, transcript))
    for i in range(6):
        transcript.append(_item("user_message", text=f"q{i} é\n"))
        transcript.append(_item("tool_call", id=f"c{i}"))  # projects to no message
        transcript.append(_item("agent_message", text="", tool_calls=[{"id": f"c{i}", "name": "t", "arguments": {"i": i}}]))
        assert transcript_chatend_length("sys", transcript) == len(transcript_chatend_text("sys", transcript))
    transcript[:5] = [_item("summary", text="earlier")]
    assert transcript_chatend_length("sys", transcript) == len(_plain("sys", transcript))
    del transcript[-2:]
    assert transcript_chatend_length("sys", transcript) == len(_plain("sys", transcript))
    del transcript[:]
    assert transcript_chatend_length("sys", transcript) == len(_plain("sys", transcript))

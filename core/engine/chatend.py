"""The Chatend projection: the transcript exactly as the model sees it.

``project_messages`` turns transcript items into chat-completions messages (the
structured projection, also what providers receive); ``chatend_text`` renders the
system prompt plus those messages as one deterministic text. Messages the engine
adds on its own (notices, summaries, controller boxes) are user-role messages
named ``turnstile``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import Any

import orjson

from core.engine.state import TranscriptItem

ENGINE_NAME = "turnstile"
MEMO_TRANSCRIPTS = 1024  # transcripts whose projection is kept (the active sessions); LRU beyond


def _attachment_line(attachments: list[dict[str, Any]]) -> str:
    names = ", ".join(
        f"{a.get('file_name', '?')} ({a.get('media_type', '?')}, id {a.get('id', '?')})"
        for a in attachments
    )
    return f"[attachments: {names}]"


def _args_text(arguments: dict[str, Any]) -> str:
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()


class TranscriptMemo:
    """Per-item projections and rendered blocks of one transcript list, and the JSON the
    checkpoint encoder splices, reused while the transcript only grows.

    A snapshot repeats the whole conversation at every checkpoint, so its encodings are kept
    joined, grown by each new item: ``transcript_json`` (the items' JSON, comma-joined),
    ``projection_json`` (the projected messages' JSON, comma-joined) and ``chatend_json`` (the
    blocks joined by a blank line, JSON-escaped, without quotes); a checkpoint copies each
    once. ``ends`` holds, per item, where its part of each ends, so a rewritten transcript (a
    compaction) cuts them back to the unchanged prefix; ``sizes`` holds, per item, the running
    totals of the messages' content characters and of the blocks' characters, so a turn reads
    the prompt's size without walking the conversation.
    """

    __slots__ = ("block_starts", "blocks", "chatend_json", "ends", "items", "messages", "projection_json", "sizes",
                 "source", "transcript_json")

    def __init__(self, source: list[TranscriptItem]) -> None:
        self.source = source
        self.items: list[TranscriptItem] = []
        self.messages: list[dict[str, Any]] = []  # projected messages of all items, flat
        self.blocks: list[str] = []  # rendered blocks of all items, flat (the chatend text joins them)
        self.block_starts: list[int] = []  # where each item's blocks (and messages: one block each) start
        self.transcript_json = bytearray()
        self.projection_json = bytearray()
        self.chatend_json = bytearray()
        self.ends = array("Q")  # per item: the lengths of the three after it (3 entries an item)
        self.sizes = array("Q")  # per item: content and block characters up to and with it (2 entries an item)

    @property
    def conversation_bytes(self) -> int:
        """Bytes the conversation adds to a snapshot: the transcript, its projection and the chatend text."""
        return len(self.transcript_json) + len(self.projection_json) + len(self.chatend_json)

    def rest_bytes(self, index: int) -> int:
        """``conversation_bytes`` of the items from ``index`` on (what a cut there keeps)."""
        if index <= 0:
            return self.conversation_bytes
        before = sum(self.ends[3 * index - 3:3 * index])
        return self.conversation_bytes - before

    @property
    def content_chars(self) -> int:
        """Characters of all projected messages' string contents (what a prompt-size estimate counts)."""
        return self.sizes[-2] if self.sizes else 0

    def sync(self, transcript: list[TranscriptItem]) -> None:
        # Transcript items are never edited in place, and a transcript list changes only at its
        # ends (the reducer appends; a compaction makes a new list, or a test rewrites the head
        # or cuts the tail), so item identity at both ends of the memo marks the reusable
        # prefix: checked in O(1) per sync, not by walking the conversation at every checkpoint.
        items = self.items
        limit = min(len(items), len(transcript))
        if not items or (limit == len(items) and transcript[0] is items[0] and transcript[limit - 1] is items[-1]):
            same = limit  # the usual case: only appended
        else:
            same = 0
            while same < limit and items[same] is transcript[same]:
                same += 1
        if same < len(items):
            del self.blocks[self.block_starts[same]:], self.messages[self.block_starts[same]:]
            del items[same:], self.block_starts[same:], self.ends[3 * same:]
            del self.sizes[2 * same:]
            t_end, p_end, c_end = self.ends[-3:] if self.ends else (0, 0, 0)
            del self.transcript_json[t_end:], self.projection_json[p_end:], self.chatend_json[c_end:]
        content_chars, block_chars = self.sizes[-2:] if self.sizes else (0, 0)
        for item in transcript[same:]:
            projected = _project_item(item)
            items.append(item)
            self.messages += projected
            self.block_starts.append(len(self.blocks))
            _join_onto(self.transcript_json, orjson.dumps(item))
            for m in projected:
                _join_onto(self.projection_json, orjson.dumps(m))
                block = _render_block(m)
                if self.blocks:
                    self.chatend_json += b"\\n\\n"
                self.blocks.append(block)
                self.chatend_json += orjson.dumps(block)[1:-1]
                content = m.get("content")
                content_chars += len(content) if isinstance(content, str) else 0
                block_chars += len(block)
            self.ends.extend((len(self.transcript_json), len(self.projection_json), len(self.chatend_json)))
            self.sizes.extend((content_chars, block_chars))


def _join_onto(joined: bytearray, part: bytes) -> None:
    if joined:
        joined += b","
    joined += part


_memos: OrderedDict[int, TranscriptMemo] = OrderedDict()


def memo_for(transcript: list[TranscriptItem]) -> TranscriptMemo:
    key = id(transcript)
    memo = _memos.get(key)
    if memo is None or memo.source is not transcript:
        memo = _memos[key] = TranscriptMemo(transcript)
        while len(_memos) > MEMO_TRANSCRIPTS:
            _memos.popitem(last=False)
    else:
        _memos.move_to_end(key)
    memo.sync(transcript)
    return memo


def forget_memo(transcript: list[TranscriptItem]) -> None:
    """Drop ``transcript``'s memo (its session is unloaded: the memo would keep it alive)."""
    memo = _memos.get(id(transcript))
    if memo is not None and memo.source is transcript:
        del _memos[id(transcript)]


def project_messages(transcript: list[TranscriptItem]) -> list[dict[str, Any]]:
    """The structured projection: chat messages for every model-visible transcript item.

    The per-item work is memoised, so projecting a growing transcript costs only its new
    items; see ``memo_messages`` for what a caller may change.
    """
    return memo_messages(memo_for(transcript))


def memo_messages(memo: TranscriptMemo) -> list[dict[str, Any]]:
    """The projection of a synced memo: a fresh list of the memo's own message dicts.

    The list is the caller's; the messages are shared with the memo (and with every later
    projection of the transcript), so they are read-only, like the transcript items they
    come from: copying them per model call made a turn cost O(conversation) in Python.
    """
    return memo.messages.copy()


def transcript_chatend_text(system_prompt: str, transcript: list[TranscriptItem]) -> str:
    """``chatend_text(system_prompt, project_messages(transcript))``, from memoised blocks."""
    return memo_chatend_text(system_prompt, memo_for(transcript))


def memo_chatend_chars(system_prompt: str, memo: TranscriptMemo) -> int:
    """``len(memo_chatend_text(system_prompt, memo))``, from the memo's running sizes."""
    head = len(f"[system]\n{system_prompt}\n\n")
    blocks = len(memo.blocks)
    return head + (memo.sizes[-1] + 2 * (blocks - 1) + 1 if blocks else 0)


def memo_chatend_text(system_prompt: str, memo: TranscriptMemo) -> str:
    """The chatend text of a synced memo."""
    blocks = memo.blocks
    return f"[system]\n{system_prompt}\n\n" + ("\n\n".join(blocks) + "\n" if blocks else "")


def memo_chatend_json(system_prompt: str, memo: TranscriptMemo) -> bytes:
    """``orjson.dumps(memo_chatend_text(system_prompt, memo))``, from the memo's joined escape.

    JSON escaping is per character, so the escape of a concatenation is the concatenation of
    the escapes: the conversation's part is escaped once, when its items arrive.
    """
    return b"".join(memo_chatend_parts(system_prompt, memo))


def memo_chatend_parts(system_prompt: str, memo: TranscriptMemo) -> tuple[bytes | bytearray, ...]:
    """``memo_chatend_json``'s bytes in parts, for a caller that joins them into more (no copy of its own)."""
    head = orjson.dumps(f"[system]\n{system_prompt}\n\n")[:-1]
    if not memo.blocks:
        return (head, b'"')
    return (head, memo.chatend_json, b'\\n"')


def _project_item(item: TranscriptItem) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    kind = item["kind"]
    payload = item["payload"]
    if kind == "user_message":
        text = payload.get("text", "")
        if payload.get("attachments"):
            text = f"{text}\n{_attachment_line(payload['attachments'])}" if text else _attachment_line(payload["attachments"])
        role = "assistant" if payload.get("agent_owned") else "user"
        messages.append({"role": role, "content": text})
    elif kind == "agent_message":
        msg: dict[str, Any] = {"role": "assistant", "content": payload.get("text", "")}
        calls = payload.get("tool_calls") or []
        if calls:
            msg["tool_calls"] = [
                {"id": c["id"], "name": c["name"], "arguments": c.get("arguments", {})}
                for c in calls
            ]
        messages.append(msg)
    elif kind == "tool_result":
        messages.append(
            {"role": "tool", "tool_call_id": payload["id"], "content": payload.get("content", "")}
        )
    elif kind == "notice":
        messages.append(_engine(f"[notice: {payload.get('code', 'info')}] {payload.get('text', '')}"))
    elif kind == "summary":
        messages.append(_engine(f"[summary of earlier conversation]\n{payload.get('text', '')}"))
    elif kind == "box":
        context = _args_text(payload.get("context") or {})
        current = payload.get("current_message_id")
        suffix = f" (current message {current})" if current else ""
        messages.append(_engine(f"[controller update{suffix}]\n{context}"))
    # tool_call markers, replies and objects are already visible through the
    # assistant's tool call and its tool result.
    return messages


def _engine(text: str) -> dict[str, Any]:
    return {"role": "user", "name": ENGINE_NAME, "content": text}


def chatend_text(system_prompt: str, messages: list[dict[str, Any]]) -> str:
    """Render the system prompt and messages as exact, deterministic text."""
    return f"[system]\n{system_prompt}\n\n" + render_messages(messages)


def render_messages(messages: list[dict[str, Any]]) -> str:
    """Render messages (no system prompt) as exact, deterministic text."""
    blocks = [_render_block(msg) for msg in messages]
    return "\n\n".join(blocks) + "\n" if blocks else ""


def _render_block(msg: dict[str, Any]) -> str:
    role = msg["role"]
    if role == "tool":
        return f"[tool {msg['tool_call_id']}]\n{msg['content']}"
    label = f"{role} ({msg['name']})" if msg.get("name") else role
    lines = [f"[{label}]", msg.get("content", "")]
    for call in msg.get("tool_calls", []):
        lines.append(f"-> call {call['id']} {call['name']} {_args_text(call['arguments'])}")
    return "\n".join(lines)


def project_transcript(transcript: list[TranscriptItem]) -> list[dict[str, Any]]:
    """``project_messages`` without the memo: for a transcript no live session holds (time travel)."""
    return [message for item in transcript for message in _project_item(item)]

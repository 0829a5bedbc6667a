"""The Chatend projection: the transcript exactly as the model sees it.

``project_messages`` turns transcript items into chat-completions messages (the
structured projection, also what providers receive); ``chatend_text`` renders the
system prompt plus those messages as one deterministic text. Messages the engine
adds on its own (notices, summaries, controller boxes) are user-role messages
named ``turnstile``.
"""

from __future__ import annotations

import operator
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


def _exact(encoded: bytes) -> bytes:
    """``encoded`` copied at its length. orjson hands back its whole write buffer (4 KB at least, even
    for 40 bytes of JSON); a memo keeps its encodings while the session is loaded."""
    return bytes(memoryview(encoded))


class TranscriptMemo:
    """Per-item projections, rendered blocks and JSON encodings of one transcript list,
    reused while it only grows (the checkpoint encoder splices the encodings)."""

    __slots__ = ("block_starts", "blocks", "item_json", "items", "messages", "messages_json", "source")

    def __init__(self, source: list[TranscriptItem]) -> None:
        self.source = source
        self.items: list[TranscriptItem] = []
        self.messages: list[list[dict[str, Any]]] = []
        self.blocks: list[str] = []  # rendered blocks of all items, flat (the chatend text joins them)
        self.block_starts: list[int] = []  # where each item's blocks start in ``blocks``
        self.item_json: list[bytes] = []  # orjson of each item
        self.messages_json: list[bytes] = []  # its projected messages, comma-joined (b"" for none)

    def sync(self, transcript: list[TranscriptItem]) -> None:
        # Transcript items are never edited in place, so item identity marks the reusable prefix.
        items = self.items
        limit = min(len(items), len(transcript))
        if all(map(operator.is_, items, transcript)):  # the usual case (only appended), checked at C speed
            same = limit
        else:
            same = 0
            while same < limit and items[same] is transcript[same]:
                same += 1
        if same < len(self.block_starts):
            del self.blocks[self.block_starts[same]:]
        del items[same:], self.messages[same:], self.block_starts[same:], self.item_json[same:], self.messages_json[same:]
        for item in transcript[same:]:
            projected = _project_item(item)
            items.append(item)
            self.messages.append(projected)
            self.block_starts.append(len(self.blocks))
            self.blocks.extend(_render_block(m) for m in projected)
            self.item_json.append(_exact(orjson.dumps(item)))
            encoded = [orjson.dumps(m) for m in projected]
            self.messages_json.append(_exact(encoded[0]) if len(encoded) == 1 else b",".join(encoded))


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

    Each message is a fresh dict (callers may change it); the per-item work is memoised,
    so projecting a growing transcript on every checkpoint costs only its new items.
    """
    memo = memo_for(transcript)
    return [dict(m) for group in memo.messages for m in group]


def transcript_chatend_text(system_prompt: str, transcript: list[TranscriptItem]) -> str:
    """``chatend_text(system_prompt, project_messages(transcript))``, from memoised blocks."""
    return memo_chatend_text(system_prompt, memo_for(transcript))


def memo_chatend_text(system_prompt: str, memo: TranscriptMemo) -> str:
    """The chatend text of a synced memo."""
    blocks = memo.blocks
    return f"[system]\n{system_prompt}\n\n" + ("\n\n".join(blocks) + "\n" if blocks else "")


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

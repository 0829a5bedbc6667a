"""The Chatend projection: the transcript exactly as the model sees it.

``project_messages`` turns transcript items into chat-completions messages (the
structured projection, also what providers receive); ``chatend_text`` renders the
system prompt plus those messages as one deterministic text. Messages the engine
adds on its own (notices, summaries, controller boxes) are user-role messages
named ``turnstile``.
"""

from __future__ import annotations

from typing import Any

import orjson

ENGINE_NAME = "turnstile"


def _attachment_line(attachments: list[dict[str, Any]]) -> str:
    names = ", ".join(
        f"{a.get('file_name', '?')} ({a.get('media_type', '?')}, id {a.get('id', '?')})"
        for a in attachments
    )
    return f"[attachments: {names}]"


def _args_text(arguments: dict[str, Any]) -> str:
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()


def project_messages(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The structured projection: chat messages for every model-visible transcript item."""
    messages: list[dict[str, Any]] = []
    for item in transcript:
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
    blocks: list[str] = []
    for msg in messages:
        role = msg["role"]
        if role == "tool":
            blocks.append(f"[tool {msg['tool_call_id']}]\n{msg['content']}")
            continue
        label = f"{role} ({msg['name']})" if msg.get("name") else role
        lines = [f"[{label}]", msg.get("content", "")]
        for call in msg.get("tool_calls", []):
            lines.append(f"-> call {call['id']} {call['name']} {_args_text(call['arguments'])}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n" if blocks else ""

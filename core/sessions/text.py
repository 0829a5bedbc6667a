"""Text objects: display strings that are not stored and are rendered per reader.

A ``TextRef`` is a catalogue key plus parameters. ``render(lang, tz)`` gives the
reader's text (English ``en`` and Chinese ``zh``; anything else falls back to
English); ``source(tz)`` is the form handed to the model (English, in the service
time zone, ``TURNSTILE_TIME_ZONE``). There is no fallback to the process's local zone:
the zone is always passed in. Timestamps in parameters are float epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Final, Literal

Language = Literal["en", "zh"]

SOURCE_LANGUAGE: Final[Language] = "en"

# key -> language -> template. ``{time}`` / ``{date_time}`` come from the
# ``at`` parameter; ``{text}`` is a literal string parameter.
CATALOGUE: Final[dict[str, dict[Language, str]]] = {
    "literal": {"en": "{text}", "zh": "{text}"},
    "session.label.root": {"en": "Session {date_time}", "zh": "会话 {date_time}"},
    "session.label.child": {"en": "Subtask {time}", "zh": "子任务 {time}"},
    "place.label.default_workspace": {"en": "Default workspace", "zh": "默认工作区"},
    "take.unknown": {
        "en": "It cannot be told where that session comes from, so nothing may be taken from it.",
        "zh": "判不出那个会话的来历,不能从它取东西。",
    },
    "take.scope_session": {
        "en": "This session may only take from itself.",
        "zh": "这个会话只能取它自己的东西。",
    },
    "take.other_platform": {
        "en": "This session may only take from sessions on its own platform.",
        "zh": "这个会话只能取同一平台的会话的东西。",
    },
    "take.cross_bot_account": {
        "en": "That session belongs to a different bot account.",
        "zh": "那个会话属于另一个机器人账号。",
    },
    "take.other_group": {
        "en": "Reading other group chats is not allowed for this session.",
        "zh": "这个会话不允许读别的群。",
    },
    "take.others_dm": {
        "en": "Reading other people's private chats is not allowed for this session.",
        "zh": "这个会话不允许读别人的私聊。",
    },
}

ParamValue = str | float | int


@dataclass(frozen=True)
class TextRef:
    """A catalogue text with parameters, rendered on demand in the reader's language."""

    key: str
    params: tuple[tuple[str, ParamValue], ...] = ()

    def __post_init__(self) -> None:
        if self.key not in CATALOGUE:
            raise ValueError(f"unknown text key {self.key!r}")

    @classmethod
    def literal(cls, text: str) -> TextRef:
        """A text that renders as itself in every language (a user-given name)."""
        return cls("literal", (("text", text),))

    @classmethod
    def at_time(cls, key: str, at_epoch_s: float) -> TextRef:
        """A catalogue text whose template shows the time ``at_epoch_s``."""
        return cls(key, (("at", at_epoch_s),))

    def param(self, name: str) -> ParamValue | None:
        """The value of parameter ``name``, or None."""
        for key, value in self.params:
            if key == name:
                return value
        return None

    def render(self, lang: str = SOURCE_LANGUAGE, tz: tzinfo = UTC) -> str:
        """The text in ``lang`` (``en``/``zh``; others → English), times shown in ``tz``."""
        templates = CATALOGUE[self.key]
        template = templates["zh"] if lang.lower().startswith("zh") else templates["en"]
        values: dict[str, str] = {}
        at = self.param("at")
        if isinstance(at, (int, float)):
            moment = datetime.fromtimestamp(float(at), tz)
            values["date_time"] = moment.strftime("%Y-%m-%d %H:%M")
            values["time"] = moment.strftime("%H:%M")
        text = self.param("text")
        if text is not None:
            values["text"] = str(text)
        return template.format(**values)

    def source(self, tz: tzinfo) -> str:
        """The form given to the model: English, in the service time zone ``tz``."""
        return self.render(SOURCE_LANGUAGE, tz)

"""Context recovery (KS-21): keep the projected context inside the model's window.

The projected context is the Chatend text (system prompt + messages), estimated
at one token per four characters. When it exceeds ``context_window_tokens`` the
oldest whole turns are summarised through the provider (usage counted) into one
``summary`` entry that replaces them in the transcript, so the snapshot stays
bounded; the journal keeps every original entry. The pending turn is never cut,
and cuts fall only on user-message boundaries so a tool call is never separated
from its result. The newest items kept aim at half the window. A cut covers every item
older than what it keeps where it can, so an earlier summary (which heads the transcript
with a newer seq than the items it kept) is replaced, not left beside the one covering it.

The snapshot repeats the conversation three times (transcript, projection, chatend
text) with ~300 bytes of JSON per item, so a conversation of short messages makes
checkpoints of megabytes long before its window fills (~1.5 MB at 32,000 tokens).
When the session has a ``snapshot_max_bytes`` (the largest checkpoint its broker
takes), the conversation is compacted the same way, even inside the window, once
it takes more than half of what the snapshot may spend on it, the newest items kept
aiming at a quarter: the check runs before each model round, so what a turn adds
after it (its answer, the next user message) has the other half, and no checkpoint
is refused by the broker (a refused one would stop the session: MQ-3).
"""

from __future__ import annotations

from core.engine.chatend import TranscriptMemo, forget_memo, memo_chatend_chars, memo_for
from core.engine.drafts import Checkpoint
from core.engine.journal import EntryKind
from core.engine.session_port import SessionPort
from core.engine.state import TranscriptItem
from core.providers.base import ModelRequest, estimate_tokens, tokens_for_chars

KEEP_FRACTION = 0.5


def projected_tokens(system_prompt: str, transcript: list[TranscriptItem]) -> int:
    """Estimated tokens of the context the model would receive (``estimate_tokens`` of its
    chatend text, from the memo's running size: checked before every model round)."""
    return tokens_for_chars(memo_chatend_chars(system_prompt, memo_for(transcript)))


def rendered_rest_chars(memo: TranscriptMemo, index: int) -> int:
    """``len(render_messages(project_messages(transcript[index:])))`` of a synced memo's transcript,
    from its running sizes: the rest's blocks, joined by blank lines, and a final newline."""
    blocks = len(memo.blocks) - (memo.block_starts[index] if index < len(memo.block_starts) else len(memo.blocks))
    if blocks == 0:
        return 0
    before = memo.sizes[2 * index - 1] if index > 0 else 0
    return memo.sizes[-1] - before + 2 * (blocks - 1) + 1


def choose_cut(
    system_prompt: str, transcript: list[TranscriptItem], window_tokens: int, protect_from: int,
    bytes_limit: int | None = None,
) -> int:
    """Index of the first transcript item to keep (0: nothing can be summarised): the first
    user-message boundary whose rendered rest fits half the window (and, given ``bytes_limit``,
    whose items' snapshot bytes fit half of that limit), else the last boundary.

    The rest's sizes come from the transcript's memo (running sizes per item), so choosing
    costs O(items), not a projection and rendering of every suffix (O(items²), and a memo
    built per slice)."""
    boundaries = [
        i for i, item in enumerate(transcript)
        if 0 < i <= protect_from and item["kind"] == "user_message"
    ]
    if not boundaries:
        return 0
    # Prefer cuts that cover every item older than what they keep: an earlier summary heads the
    # transcript with a newer seq than the items it kept, and a cut among those would leave it in
    # place, after the summary that also covers it (the model would read it twice, out of order).
    candidates = [i for i in boundaries if covers_whole(transcript, i)] or boundaries
    memo = memo_for(transcript)
    target = int(window_tokens * KEEP_FRACTION) - estimate_tokens(system_prompt)
    bytes_target = None if bytes_limit is None else int(bytes_limit * KEEP_FRACTION)
    for index in candidates:
        if tokens_for_chars(rendered_rest_chars(memo, index)) <= target and (
            bytes_target is None or memo.rest_bytes(index) <= bytes_target
        ):
            return index
    return candidates[-1]


def covers_whole(transcript: list[TranscriptItem], cut: int) -> bool:
    """Every item before ``cut`` is older (a lower seq) than the item at ``cut``.

    Only the head is out of order (a summary; a second summary behind it, in a journal written
    before this rule, is older than the head), so the head's seq and the one before the cut decide."""
    kept = transcript[cut]["seq"]
    return transcript[0]["seq"] < kept and transcript[cut - 1]["seq"] < kept


def covered_through(transcript: list[TranscriptItem], cut: int) -> int:
    """``covers_through_seq`` of a summary replacing ``transcript[:cut]``: the reducer keeps the
    items with a higher seq, so a whole cover names the newest seq it covers."""
    if covers_whole(transcript, cut):
        return max(transcript[0]["seq"], transcript[cut - 1]["seq"])
    return transcript[cut - 1]["seq"]


def conversation_limit(session: SessionPort) -> int | None:
    """Snapshot bytes of conversation past which it is compacted: half of ``snapshot_max_bytes``
    less the rest of the last snapshot (state, events, boxes); None without a bound."""
    if session.snapshot_max_bytes is None:
        return None
    return max(session.snapshot_max_bytes - session.snapshot_rest_bytes, 0) // 2


async def recover_context(session: SessionPort, checkpoint: Checkpoint | None) -> bool:
    """Summarise old turns when the context is over the window; True if it compacted."""
    state = session.state
    window = state.runtime.context_window_tokens
    transcript = state.transcript
    memo = memo_for(transcript)
    limit = conversation_limit(session)
    over_bytes = limit is not None and memo.conversation_bytes > limit
    if not over_bytes and tokens_for_chars(memo_chatend_chars(session.system_prompt, memo)) <= window:
        return False
    protect_from = len(transcript) - 1
    if state.turn.pending:
        for index, item in enumerate(transcript):
            if item.get("turn_id") == state.turn.turn_id:
                protect_from = index
                break
    cut = choose_cut(session.system_prompt, transcript, window, protect_from, limit)
    if cut == 0:
        return False
    covered = transcript[:cut]
    request = ModelRequest(
        model=state.runtime.model,
        reasoning_effort=state.runtime.reasoning_effort,
        system_prompt="Summarise the conversation below so it can continue without it.",
        messages=memo.messages[: memo.block_starts[cut]],  # the covered items' projection (read-only dicts)
        purpose="summary",
    )
    response = await session.guarded(session.provider.complete(request))
    session.last_usage = session.last_usage + response.usage
    payload = {
        "text": response.text,
        "covers_through_seq": covered_through(transcript, cut),
        "replaced_count": len(covered),
        "usage": response.usage.model_dump(),
    }
    await session.commit([session.draft(EntryKind.SUMMARY, payload, in_turn=False)], checkpoint)
    forget_memo(transcript)  # the summary made a new transcript list: the old one's memo is garbage now
    return True

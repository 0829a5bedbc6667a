"""The session-id token codec of wire protocol v1."""

from __future__ import annotations

import pytest

from schemas.tokens import NO_SESSION, decode_sid, encode_sid


@pytest.mark.parametrize(
    ("session_id", "token"),
    [
        ("abc-123", "abc-123"),
        ("telegram:group:42", "telegram:group:42"),
        ("a.b", "a~2Eb"),
        ("wild*card>", "wild~2Acard~3E"),
        ("tilde~", "tilde~7E"),
        ("with space", "with~20space"),
        ("会话", "~E4~BC~9A~E8~AF~9D"),
        ("user@host+x=y_z", "user@host+x=y_z"),
        ("_", "~5F"),
    ],
)
def test_session_ids_become_single_subject_tokens_and_back(session_id: str, token: str) -> None:
    assert encode_sid(session_id) == token
    assert decode_sid(token) == session_id
    assert "." not in token and "*" not in token and ">" not in token and " " not in token


def test_no_session_is_a_lone_underscore() -> None:
    assert encode_sid(None) == NO_SESSION == "_"
    assert decode_sid("_") is None


@pytest.mark.parametrize("bad", ["", "a~2", "a~zz", "a.b", "a b", "~FF", "é"])
def test_malformed_tokens_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_sid(bad)


def test_empty_session_id_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_sid("")


def test_encoding_the_ids_of_many_sessions_keeps_a_bounded_cache() -> None:
    # Every session a process touches went through encode_sid; its cache must not grow with them.
    for i in range(20_000):
        encode_sid(f"cache-{i}")
    assert encode_sid.cache_info().currsize <= 4096


def test_a_plain_session_id_is_its_own_token() -> None:
    sid = "plain-Id_09:@+="
    assert encode_sid(sid) is sid
    assert decode_sid(encode_sid(sid)) == sid

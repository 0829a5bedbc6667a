"""Validation of raw inbound messages: every bad input becomes a clear {code, message} (MQ-9)."""

from __future__ import annotations

import orjson
import pytest

from consumers.inbound_decoding import decode_inbound
from schemas.wire import ErrorBody, InboundMessage

PREFIX = "turnstile"
SUBJECT = "turnstile.inbound.cli.s1"


def body(**kw: object) -> bytes:
    data: dict[str, object] = {"id": "m1", "session_id": "s1", "platform": "cli", "text": "hi"}
    data.update(kw)
    return orjson.dumps(data)


def test_a_good_message_decodes() -> None:
    msg = decode_inbound(PREFIX, SUBJECT, body(), 1000)
    assert isinstance(msg, InboundMessage)
    assert (msg.id, msg.session_id, msg.platform, msg.text) == ("m1", "s1", "cli", "hi")


@pytest.mark.rule("MQ-9")
@pytest.mark.parametrize(
    ("subject", "raw", "code"),
    [
        (SUBJECT, b"{not json", "bad_json"),  # MQ-9
        (SUBJECT, orjson.dumps({"id": "m1"}), "invalid"),
        (SUBJECT, body(text=5), "invalid"),
        (SUBJECT, body(surprise=True), "invalid"),
        (SUBJECT, body(text="x" * 2000), "too_large"),
        ("turnstile.inbound.web.s1", body(), "subject_mismatch"),
        ("turnstile.inbound.cli.s2", body(), "subject_mismatch"),
        ("turnstile.inbound.cli.a~zz", body(), "bad_subject"),
        ("turnstile.inbound.cli._", body(session_id=None), "no_session"),
        (SUBJECT, body(attachments=[{"file_name": ""}]), "invalid_attachment"),
        (SUBJECT, body(attachments=[{"file_name": "../../etc/passwd"}]), "invalid_attachment"),
        (SUBJECT, body(attachments=[{"file_name": "a.txt", "data_base64": "%%%"}]), "invalid_attachment"),
        (SUBJECT, body(attachments=[{"file_name": "a.txt", "data_base64": "eHh4" * 200}]), "invalid_attachment"),
        (SUBJECT, body(attachments=[{"file_name": "a.txt"}] * 33), "invalid_attachment"),
    ],
)
def test_bad_input_is_refused_with_a_clear_code(subject: str, raw: bytes, code: str) -> None:
    # MQ-9: bad input never raises; it becomes an ErrorBody with a stable code.
    err = decode_inbound(PREFIX, subject, raw, 1000 if code == "too_large" else 10_000, max_attachment_bytes=500)
    assert isinstance(err, ErrorBody)
    assert err.code == code
    assert err.message


def test_a_session_id_too_long_for_a_subject_token_is_invalid() -> None:
    # 300 × "é" is 600 bytes of UTF-8: its 1800-character token plus the service's own
    # subjects would crowd the server's control line, so the id is refused, not filed.
    sid = "é" * 300
    subject = f"turnstile.inbound.cli.{'~C3~A9' * 300}"
    err = decode_inbound(PREFIX, subject, body(session_id=sid), 100_000)
    assert isinstance(err, ErrorBody) and err.code == "invalid" and "session id" in err.message
    fits = "é" * 256
    ok = decode_inbound(PREFIX, f"turnstile.inbound.cli.{'~C3~A9' * 256}", body(session_id=fits), 100_000)
    assert isinstance(ok, InboundMessage)


@pytest.mark.parametrize("sid", ["a\x00b", "tab\there", "new\nline", "\x1f", "end\r"])
def test_a_session_id_with_a_control_character_is_invalid(sid: str) -> None:
    from schemas.tokens import encode_sid

    decoded = decode_inbound(PREFIX, f"{PREFIX}.inbound.cli.{encode_sid(sid)}", body(session_id=sid), 1000)
    assert isinstance(decoded, ErrorBody) and decoded.code == "invalid"


def test_a_session_id_with_printable_and_non_ascii_characters_is_valid() -> None:
    from schemas.tokens import encode_sid

    sid = "chat space é\x7f 漢"
    decoded = decode_inbound(PREFIX, f"{PREFIX}.inbound.cli.{encode_sid(sid)}", body(session_id=sid), 1000)
    assert isinstance(decoded, InboundMessage) and decoded.session_id == sid

"""A dead letter always fits under the broker's max_payload, whatever the rejected payload was."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from consumers.dead_letters import ENVELOPE_RESERVE_BYTES, dead_letter_payload

MB = 1024 * 1024


def letter_for(raw: bytes, *, raw_max_bytes: int, max_payload_bytes: int, headers: dict[str, str] | None = None) -> bytes:
    return dead_letter_payload(
        subject="turnstile.inbound.cli.s1", raw=raw, headers=headers, code="too_large", message="m",
        stream_seq=7, raw_max_bytes=raw_max_bytes, max_payload_bytes=max_payload_bytes, at=0.0,
    )


@pytest.mark.rule("MQ-9")
@pytest.mark.parametrize(
    ("raw", "raw_max_bytes", "max_payload_bytes"),
    [
        ((b"\x00\xff" * (5 * MB // 2)), 16_384, 8 * MB),  # issue 10.5: 5 MB of binary under an 8 MB server
        ((b"\x00\x01" * (5 * MB // 2)), 10 * MB, 8 * MB),  # a bound set above what the server takes
        ((b"\x00" * 60_000), 60_000, 65_536),  # worst-case escaping: 6 bytes per NUL
        ("é".encode() * 40_000, 100_000, 65_536),
    ],
)
def test_a_letter_fits_and_identifies_the_whole_original(raw: bytes, raw_max_bytes: int, max_payload_bytes: int) -> None:
    payload = letter_for(raw, raw_max_bytes=raw_max_bytes, max_payload_bytes=max_payload_bytes)
    assert len(payload) <= max_payload_bytes - ENVELOPE_RESERVE_BYTES
    letter = orjson.loads(payload)
    assert letter["raw_size_bytes"] == len(raw) and letter["raw_truncated"] is True
    assert letter["raw_sha256"] == hashlib.sha256(raw).hexdigest() and letter["stream_seq"] == 7
    assert len(letter["raw"]) > 0 and raw.decode("utf-8", errors="replace").startswith(letter["raw"].rstrip("\ufffd"))


def test_a_small_payload_is_kept_whole() -> None:
    letter = orjson.loads(letter_for(b"{not json", raw_max_bytes=16_384, max_payload_bytes=MB))
    assert (letter["raw"], letter["raw_truncated"], letter["raw_size_bytes"]) == ("{not json", False, 9)


def test_huge_headers_are_dropped_before_the_letter_overflows() -> None:
    headers = {f"h{i}": "v" * 1000 for i in range(100)}
    payload = letter_for(b"x" * 100, raw_max_bytes=16_384, max_payload_bytes=65_536, headers=headers)
    assert len(payload) <= 65_536 - ENVELOPE_RESERVE_BYTES
    assert orjson.loads(payload)["headers"] == {}

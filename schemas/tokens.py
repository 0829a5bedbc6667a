"""The reversible session-id token used inside NATS subjects.

ASCII letters, digits and ``-_:@+=`` stay as they are; every other byte of the
UTF-8 encoding (``.``, ``*``, ``>``, ``~``, spaces, non-ASCII, …) becomes
``~XX`` with uppercase hex. ``_`` alone stands for "no session"; a real
session id ``_`` is therefore encoded as ``~5F``.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache

NO_SESSION = "_"
# A session id's token goes into subjects; the server closes a connection whose
# PUB line exceeds max_control_line (4096 bytes by default). 512 bytes of UTF-8
# make a token of at most 1536 characters, which leaves room for the rest.
MAX_SESSION_ID_BYTES = 512
_KEEP = frozenset((string.ascii_letters + string.digits + "-_:@+=").encode())
_HEX = frozenset(b"0123456789ABCDEF")
_PLAIN = re.compile(r"[A-Za-z0-9\-_:@+=]+")  # a session id made of _KEEP only is its own token


# Pure, and called for every subject a message touches. Bounded well below the sessions a
# process touches: a miss costs a regex match for a plain id, and each entry held ~200 B for
# the life of the process (2 MB at 10,000 sessions touched with the old 65,536).
@lru_cache(maxsize=4096)
def encode_sid(session_id: str | None) -> str:
    """Encode a session id (or None) into a single subject token."""
    if session_id is None:
        return NO_SESSION
    if session_id == NO_SESSION:
        return "~5F"
    if _PLAIN.fullmatch(session_id) is not None:
        return session_id
    if session_id == "":
        raise ValueError("session id must not be empty")
    out: list[str] = []
    for byte in session_id.encode("utf-8"):
        out.append(chr(byte) if byte in _KEEP else f"~{byte:02X}")
    return "".join(out)


def check_session_id_size(session_id: str) -> str:
    """Return ``session_id`` if its UTF-8 form fits in a subject token; else ValueError."""
    size = len(session_id.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SESSION_ID_BYTES:
        raise ValueError(
            f"session id is {size} bytes of UTF-8; the limit is {MAX_SESSION_ID_BYTES} (it must fit in a subject)"
        )
    return session_id


def decode_sid(token: str) -> str | None:
    """Decode a subject token back into the session id (None for ``_``).

    Raises ValueError on a malformed token (bad escape, forbidden character).
    """
    if token == NO_SESSION:
        return None
    if _PLAIN.fullmatch(token) is not None:
        return token  # no escape and only kept characters: the token is the id (what the loop below gives)
    if not token:
        raise ValueError("empty session token")
    raw = bytearray()
    data = token.encode("ascii", errors="strict") if token.isascii() else None
    if data is None:
        raise ValueError(f"session token must be ASCII: {token!r}")
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == ord("~"):
            pair = data[i + 1 : i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                raise ValueError(f"bad escape at {i} in session token {token!r}")
            raw.append(int(pair, 16))
            i += 3
        elif byte in _KEEP:
            raw.append(byte)
            i += 1
        else:
            raise ValueError(f"character {chr(byte)!r} not allowed in session token {token!r}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"session token {token!r} is not UTF-8: {exc}") from exc

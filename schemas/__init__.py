"""turnstile's wire protocol v1: pydantic models, subject names, the session-id token codec.

Clients may depend on this package alone.
"""

from schemas.tokens import NO_SESSION, decode_sid, encode_sid

PROTOCOL_VERSION = 1

__all__ = ["NO_SESSION", "PROTOCOL_VERSION", "decode_sid", "encode_sid"]

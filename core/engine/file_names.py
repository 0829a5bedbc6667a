"""The recipient-visible file-name contract (KS-12), the same for every delivery."""

from __future__ import annotations

import unicodedata

from core.errors import InvalidInput

MAX_FILE_NAME_BYTES = 255


def validate_delivery_file_name(name: object) -> str:
    """Return ``name`` if it is a bounded, path-free, control-free file name; else InvalidInput."""
    if not isinstance(name, str):
        raise InvalidInput("file name must be a string")
    if not name or not name.strip():
        raise InvalidInput("file name must not be empty")
    if len(name.encode("utf-8")) > MAX_FILE_NAME_BYTES:
        raise InvalidInput(f"file name is longer than {MAX_FILE_NAME_BYTES} bytes")
    if "/" in name or "\\" in name:
        raise InvalidInput("file name must not contain path separators")
    if name in (".", ".."):
        raise InvalidInput("file name must not be a relative path part")
    for char in name:
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise InvalidInput(f"file name contains a control character (U+{ord(char):04X})")
    if name != name.strip():
        raise InvalidInput("file name must not start or end with whitespace")
    return name

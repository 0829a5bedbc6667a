"""The crash soak: sessions × messages under SIGKILLs and deletions, checked by an oracle (docs/protocol.md)."""

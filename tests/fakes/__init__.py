"""In-memory twins of the core's ports (journal, knowledge store, session repository), for tests only."""

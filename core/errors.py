"""One error tree for turnstile. Every error carries a stable wire ``code``."""

from __future__ import annotations


class TurnstileError(Exception):
    """Base class of every error turnstile raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(TurnstileError):
    """Raised when a caller's input breaks a rule (bad value, bad combination)."""

    code = "invalid"


class NotFound(TurnstileError):
    """Raised when the named session, place, workspace or object does not exist."""

    code = "not_found"


class Conflict(TurnstileError):
    """Raised when the operation conflicts with current state (pending turn, concurrent write)."""

    code = "conflict"


class Forbidden(TurnstileError):
    """Raised when a take-rule, a root confinement or a mode forbids the operation."""

    code = "forbidden"


class TooLarge(TurnstileError):
    """Raised when an input exceeds a configured size limit."""

    code = "too_large"


class SubjectTooLong(TooLarge):
    """Raised when a publish's subject would exceed the server's control line (it would close the connection)."""


class Unavailable(TurnstileError):
    """Raised when a dependency (broker, database, provider) cannot be reached right now."""

    code = "unavailable"


class ProviderError(TurnstileError):
    """Raised when the model provider fails or returns something unusable."""

    code = "provider_error"


class CheckpointFailed(TurnstileError):
    """Raised when publishing a checkpoint fails; it aborts the running turn (KS-10)."""

    code = "checkpoint_failed"


class StaleGeneration(TurnstileError):
    """Raised when a reply is about to go out for a generation the session no longer has (deleted, SM-22)."""

    code = "stale_generation"


class Cancelled(TurnstileError):
    """Raised inside a turn when its operation id was cancelled."""

    code = "cancelled"


class OwnershipLost(Unavailable):
    """Raised when another process owns the session now (its partition moved): the work stops here, nothing is written.

    Unavailable here, so whatever leaves an unavailable store's work staged does the same with it;
    it is not retried in this process (``consumers/retry_policy.py``): the new owner serves it."""

"""``not_now``: which broker errors mean "ask again" (start-up steps, the lease) and which are answers."""

from __future__ import annotations

import nats.errors
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError, ServiceUnavailableError

from consumers.connect import not_now


def test_unavailable_and_timeouts_are_not_now() -> None:
    assert not_now(APIError(code=503, description="JetStream system temporarily unavailable"))
    assert not_now(ServiceUnavailableError())
    assert not_now(nats.errors.TimeoutError())
    assert not_now(nats.errors.NoRespondersError())


def test_answers_are_not_not_now_even_without_a_code() -> None:
    # nats-py's KeyValue errors are APIErrors that never set ``code``: reading it raised AttributeError,
    # which stopped a restarting service whose predecessor's lease expired as it asked for it.
    assert not not_now(KeyNotFoundError())
    assert not not_now(KeyWrongLastSequenceError())
    assert not not_now(NotFoundError(code=404, description="not found"))

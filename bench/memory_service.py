"""``python -m bench.memory_service``: ``turnstile run`` with in-process memory probes (bench/memory.py).

The service is the unmodified ``consumers.cli run``; this wrapper only adds:

- ``$BENCH_TRACEMALLOC_FRAMES`` > 0: ``tracemalloc`` started before the service is imported
  (so start-up allocations are traced too; it slows the process, so RSS is not read in that mode);
- SIGUSR1: after a full ``gc.collect()`` (what it found unreachable counted by type first: the
  reference cycles left for the collector), writes ``$BENCH_MEMORY_OUT.json`` — live objects by type
  (count, shallow bytes), the containers with 1,000 items or more (by owner: the maps that grow with
  sessions), RSS before and after glibc's ``malloc_trim(0)`` and, when tracing, the top allocation sites by line, by module and by
  traceback — then ``$BENCH_MEMORY_OUT.done``.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import signal
import sys
import time
import tracemalloc
import types
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

TOP = 40


def _objects_by_type() -> list[tuple[str, int, int]]:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for obj in gc.get_objects():
        t = type(obj)
        name = f"{t.__module__}.{t.__qualname__}"
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
    return [(name, counts[name], sizes[name]) for name, _ in sizes.most_common(TOP)]


def _module_of(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            rest = filename.split(marker, 1)[1]
            return rest.split("/", 2)[0] if marker == "/site-packages/" else "stdlib:" + rest.split("/", 2)[1]
    root = str(Path(__file__).resolve().parent.parent) + "/"
    rel = filename.replace(root, "")
    return "/".join(rel.split("/")[:2])


def _traced() -> dict[str, Any]:
    snap = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>"))
    )
    by_module: Counter[str] = Counter()
    for stat in snap.statistics("filename"):
        by_module[_module_of(stat.traceback[0].filename)] += stat.size
    lines = [(str(s.traceback[0]), s.size, s.count) for s in snap.statistics("lineno")[:TOP]]
    tracebacks = [
        (s.size, s.count, [str(f) for f in s.traceback.format()]) for s in snap.statistics("traceback")[:TOP]
    ]
    total = sum(s.size for s in snap.statistics("filename"))
    return {"traced_bytes": total, "by_module": by_module.most_common(TOP), "by_line": lines, "by_traceback": tracebacks}


# Where a walk from one actor stops: things every session shares (or that lead to the others).
_SHARED_TYPES = (types.ModuleType, type, types.FunctionType, types.CodeType, types.BuiltinFunctionType,
                 asyncio.AbstractEventLoop, asyncio.Task, logging.Logger)


def _reachable(root: object, stop: set[int]) -> dict[int, tuple[object, str]]:
    """Objects reachable from ``root`` (not through ``stop`` ids or shared types), each with the path
    (attribute names, ``[type]`` for an unnamed hop) it was first met by."""
    seen: dict[int, tuple[object, str]] = {id(root): (root, "")}
    todo: list[tuple[object, str, dict[int, str] | None]] = [(root, "", None)]
    while todo:
        obj, path, names = todo.pop()
        if names is None:
            names = {}
            d = getattr(obj, "__dict__", None) if not isinstance(obj, type) else None
            if isinstance(d, dict):
                names = {id(v): k for k, v in d.items()}
            else:
                d = None
            for slot in getattr(type(obj), "__slots__", ()):
                v = getattr(obj, slot, None)
                if v is not None:
                    names[id(v)] = slot
        else:
            d = None
        for ref in gc.get_referents(obj):
            rid = id(ref)
            if rid in seen or rid in stop or isinstance(ref, _SHARED_TYPES):
                continue
            if ref is d:
                seen[rid] = (ref, path)
                todo.append((ref, path, names))  # the instance dict: its values are named by their keys
                continue
            sub = f"{path}.{names[rid]}" if rid in names else f"{path}.[{type(ref).__qualname__}]"
            seen[rid] = (ref, sub)
            todo.append((ref, sub, None))
    return seen


def _actor_retained(sample: int = 20) -> dict[str, Any]:
    """What one loaded session actor holds alone: objects reachable from it and from no other sampled actor,
    by attribute path (first two levels) and by type, averaged over ``sample`` actors."""
    actors = [o for o in gc.get_objects() if type(o).__name__ == "SessionActor"]
    registries = [o for o in gc.get_objects() if type(o).__name__ == "ActorRegistry"]
    loaded = sum(len(r) for r in registries)  # type: ignore[arg-type]
    if len(actors) < 2:
        return {"actors": len(actors), "registered": loaded}
    stop = {id(r) for r in registries} | {id(a) for a in actors}
    picked = actors[:sample]
    walks = []
    memos = sys.modules["core.engine.chatend"]._memos  # the transcript's chatend memo: a module-level LRU
    for a in picked:
        walk = _reachable(a, stop - {id(a)})
        transcript = getattr(getattr(getattr(a.runner, "_engine", None), "_state", None), "transcript", None)
        memo = memos.get(id(transcript))
        if memo is not None and memo.source is transcript:
            for rid, (obj, path) in _reachable(memo, stop | set(walk)).items():
                walk[rid] = (obj, ".chatend_memo" + path)
        walks.append(walk)
    counts: Counter[int] = Counter()
    for w in walks:
        counts.update(w.keys())
    by_path: Counter[str] = Counter()
    by_type: Counter[str] = Counter()
    total = 0
    for w in walks:
        for rid, (obj, path) in w.items():
            if counts[rid] > 1:
                continue
            size = sys.getsizeof(obj)
            total += size
            by_path[".".join(path.split(".")[:int(os.environ.get("BENCH_PATH_DEPTH", "4"))])] += size
            by_type[type(obj).__qualname__] += size
    n = len(walks)
    return {
        "actors": len(actors), "registered": loaded, "sampled": n, "bytes_per_actor": total // n,
        "by_path": [(k, v // n) for k, v in by_path.most_common(TOP)],
        "by_type": [(k, v // n) for k, v in by_type.most_common(TOP)],
    }


def _owner_of(container: object) -> str:
    """Where ``container`` hangs: ``Type.attribute`` of the object whose ``__dict__`` (or slot) holds it."""
    for ref in gc.get_referrers(container):
        if isinstance(ref, dict):
            key = next((k for k, v in ref.items() if v is container), None)
            owners = [o for o in gc.get_referrers(ref) if getattr(o, "__dict__", None) is ref]
            if owners:
                return f"{type(owners[0]).__qualname__}.{key}"
            if key is not None and isinstance(ref.get("__name__"), str):
                return f"{ref['__name__']}.{key}"
        elif not isinstance(ref, (list, types.FrameType)) and hasattr(type(ref), "__slots__"):
            slot = next((n for n in type(ref).__slots__ if getattr(ref, n, None) is container), None)
            if slot:
                return f"{type(ref).__qualname__}.{slot}"
    return "?"


def _big_containers(min_len: int = 1000) -> list[tuple[str, str, int, int]]:
    """Dicts, sets, lists and deques holding at least ``min_len`` items (the maps that grow with sessions):
    owner, type, length, shallow bytes. Also the ones the collector does not track (a ``dict[str, str]``,
    a ``set[str]``: found through their owners), those frozen at start-up (``gc.freeze()``: module-level
    maps; unfrozen for the scan) and ``lru_cache`` wrappers by their size."""
    gc.unfreeze()
    kinds = (dict, set, list, collections.deque, collections.OrderedDict)
    found: dict[int, tuple[str, str, int, int]] = {}
    for obj in gc.get_objects():
        if type(obj) in kinds and len(obj) >= min_len:  # type: ignore[arg-type]
            found[id(obj)] = (_owner_of(obj), type(obj).__qualname__, len(obj), sys.getsizeof(obj))  # type: ignore[arg-type]
        elif type(obj) is functools._lru_cache_wrapper and obj.cache_info().currsize >= min_len:
            name = f"{obj.__module__}.{obj.__qualname__}"
            found[id(obj)] = (name, "lru_cache", obj.cache_info().currsize, 0)
        for ref in gc.get_referents(obj):
            if type(ref) in kinds and not gc.is_tracked(ref) and len(ref) >= min_len and id(ref) not in found:
                found[id(ref)] = (_owner_of(ref), type(ref).__qualname__ + " (untracked)", len(ref), sys.getsizeof(ref))
    return sorted(found.values(), key=lambda f: (-f[2], f[0]))[:TOP]


def _holders_of_strings(part: str, sample: int = 5) -> dict[str, Any]:
    """``$BENCH_HOLDERS_OF``: the live strings containing ``part`` and what holds them (referrer type, owner),
    to find who keeps per-session strings."""
    holders: Counter[str] = Counter()
    examples: list[str] = []
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            if type(ref) is str and part in ref:
                holder = type(obj).__qualname__
                if type(obj) in (dict, list, tuple, set):
                    holder += " in " + _owner_of(obj)
                holders[holder] += 1
                if len(examples) < sample:
                    examples.append(ref)
    return {"part": part, "holders": holders.most_common(TOP), "examples": examples}


def _cyclic_garbage() -> dict[str, Any]:
    """A full collection, keeping what it found unreachable (``DEBUG_SAVEALL``): the reference cycles the
    service left behind since the collector last ran that far, by type (count, shallow bytes); then freed."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        found = gc.collect()
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for obj in gc.garbage:
            t = type(obj)
            name = f"{t.__module__}.{t.__qualname__}"
            counts[name] += 1
            sizes[name] += sys.getsizeof(obj)
        total = sum(sizes.values())
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    gc.collect()
    return {"objects": found, "shallow_bytes": total,
            "by_type": [(name, counts[name], sizes[name]) for name, _ in sizes.most_common(TOP)]}


def _pymalloc_stats() -> dict[str, int]:
    """The totals of ``sys._debugmallocstats()`` (CPython's small-object allocator: arenas, used and free blocks)."""
    import io
    import re

    err = io.StringIO()
    fd = os.dup(2)
    with open(os.devnull, "w"):
        r, w = os.pipe()
        os.dup2(w, 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(fd, 2)
            os.close(w)
            os.close(fd)
        with os.fdopen(r) as pipe:
            err.write(pipe.read())
    out: dict[str, int] = {}
    for line in err.getvalue().splitlines():
        m = re.match(r"^# (arenas allocated current|bytes in allocated blocks|bytes in available blocks"
                     r"|bytes lost to pool headers|bytes lost to quantization|bytes lost to arena alignment"
                     r"|bytes in \d+ unused pools)\s*=\s*([\d,]+)", line)
        if m:
            out[re.sub(r"\d+ ", "", m.group(1)).replace(" ", "_")] = int(m.group(2).replace(",", ""))
    return out


def _anonymous_regions(top: int = 25) -> list[tuple[str, int, int]]:
    """The largest resident anonymous mappings (``/proc/self/smaps``): name (``[heap]`` is the main malloc
    heap; a thread's malloc arena is an unnamed 64 MB reservation), virtual size, resident bytes."""
    regions: list[tuple[str, int, int]] = []
    name, size = "", 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            start, end = (int(x, 16) for x in head[0].split("-"))
            name, size = (head[5] if len(head) > 5 else "[anon]"), end - start
        elif head[0] == "Anonymous:" and int(head[1]) > 0:
            regions.append((name, size, int(head[1]) * 1024))
    return sorted(regions, key=lambda r: -r[2])[:top]


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo() -> dict[str, int]:
    """glibc's ``mallinfo2()``: bytes its arenas hold from the system (``arena``), in use (``uordblks``), free
    inside them (``fordblks``), and in direct mmaps (``hblkhd``); {} when not glibc 2.33+."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {name: int(getattr(info, name)) for name in ("arena", "uordblks", "fordblks", "hblkhd")}


def _malloc_trim() -> int | None:
    """glibc's ``malloc_trim(0)``: give free heap pages back to the system (None: not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return int(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return None


def main() -> None:
    out = os.environ["BENCH_MEMORY_OUT"]
    frames = int(os.environ.get("BENCH_TRACEMALLOC_FRAMES", "0"))
    if frames > 0:
        tracemalloc.start(frames)

    def dump(_sig: int, _frame: FrameType | None) -> None:
        data: dict[str, Any] = {"cyclic_garbage": _cyclic_garbage()}
        data.update({"gc_objects": len(gc.get_objects()), "by_type": _objects_by_type()})
        data["pymalloc"] = _pymalloc_stats()
        data["anonymous_regions"] = _anonymous_regions()
        data["mallinfo"] = _mallinfo()
        data["rss_before_trim_bytes"] = _rss_bytes()
        started = time.perf_counter()
        data["malloc_trim"] = _malloc_trim()
        data["malloc_trim_s"] = time.perf_counter() - started
        # The service's own trims (consumers/heap_trim.py): how many so far, and their time.
        data["heap_trims"] = [(o.trims, o.seconds) for o in gc.get_objects() if type(o).__name__ == "HeapTrim"]
        data["rss_after_trim_bytes"] = _rss_bytes()
        data["actor_retained"] = _actor_retained()  # after the RSS reads: the walk allocates
        if os.environ.get("BENCH_HOLDERS_OF"):
            data["holders_of"] = _holders_of_strings(os.environ["BENCH_HOLDERS_OF"])
        data["big_containers"] = _big_containers()
        if frames > 0:
            data.update(_traced())
        Path(out + ".json").write_bytes(orjson.dumps(data))
        Path(out + ".done").write_text("1")

    signal.signal(signal.SIGUSR1, dump)
    from consumers.cli import main as cli_main

    sys.exit(cli_main(["run"]))


if __name__ == "__main__":
    main()

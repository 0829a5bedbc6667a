"""SQL knowledge store: root-confined reads, atomic revalidated commits (KS-18, KS-11)."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine import (
    AgentMode,
    LeaseRegistry,
    RuntimeModel,
    SameSessionOnly,
    Session,
    SessionOptions,
    builtin_registry,
)
from core.engine.state import KnowledgeOp
from core.errors import Conflict
from core.providers import ScriptedProvider
from core.store.knowledge_repo import SqlKnowledgeStore
from tests.fakes.journal import InMemoryJournal


def _node(node_id: str, parent: str | None, content: str, base: int | None = None) -> KnowledgeOp:
    return KnowledgeOp(op="put_node", node_id=node_id, parent_id=parent, content=content, base_version=base)


async def test_nodes_objects_search_and_ancestors(engine: AsyncEngine) -> None:
    store = SqlKnowledgeStore(engine)
    p = uuid.uuid4().hex[:6]
    blob = base64.b64encode(b"\x00\x01binary").decode()
    await store.commit(f"ws-{p}", [
        _node(f"{p}-root", None, "Root"),
        _node(f"{p}-a", f"{p}-root", "Alpha 100% needle"),
        _node(f"{p}-b", f"{p}-a", "beta NEEDLE"),
        _node(f"{p}-x", None, "outside needle"),
        KnowledgeOp(op="put_object", node_id=f"{p}-a", object_id=f"{p}-o", file_name="f.bin",
                    media_type="application/octet-stream", data_b64=blob),
    ])
    assert (await store.get_node(f"{p}-b")).version == 1
    assert await store.ancestors(f"{p}-b") == [f"{p}-a", f"{p}-root"]
    assert [n.id for n in await store.children(f"{p}-root")] == [f"{p}-a"]
    assert [n.id for n in await store.search("needle", [f"{p}-root"], 10)] == [f"{p}-a", f"{p}-b"]
    assert [n.id for n in await store.search("100%", [f"{p}-root"], 10)] == [f"{p}-a"]
    assert (await store.get_object(f"{p}-o")).data == b"\x00\x01binary"


@pytest.mark.rule("KS-18")
async def test_commit_revalidates_and_writes_nothing_on_conflict(engine: AsyncEngine) -> None:
    # KS-18
    store = SqlKnowledgeStore(engine)
    p = uuid.uuid4().hex[:6]
    await store.commit(f"seed-{p}", [_node(f"{p}-doc", None, "v1")])
    await store.commit(f"other-{p}", [_node(f"{p}-doc", None, "theirs", base=1)])
    with pytest.raises(Conflict):
        await store.commit(f"mine-{p}", [_node(f"{p}-new", None, "fresh"), _node(f"{p}-doc", None, "mine", base=1)])
    assert await store.get_node(f"{p}-new") is None
    assert (await store.get_node(f"{p}-doc")).content == "theirs"
    with pytest.raises(Conflict):
        await store.commit(f"dup-{p}", [_node(f"{p}-doc", None, "x")])  # "new" node that exists


@pytest.mark.rule("KS-18")
async def test_free_time_session_commits_atomically_on_sql(engine: AsyncEngine) -> None:
    # KS-18, KS-11
    store = SqlKnowledgeStore(engine)
    p = uuid.uuid4().hex[:6]
    root = f"{p}-root"
    await store.commit(f"seed-{p}", [
        _node(root, None, "root"),
        KnowledgeOp(op="put_object", node_id=root, object_id=f"{p}-img", file_name="a.png",
                    media_type="image/png", data_b64=base64.b64encode(b"PNG").decode()),
    ])
    lines = [
        f"/tool knowledge_write {orjson.dumps({'parent_id': root, 'content': 'one', 'node_id': f'{p}-1'}).decode()}",
        f"/tool knowledge_write {orjson.dumps({'parent_id': f'{p}-1', 'content': 'two'}).decode()}",
        f"/tool knowledge_write {orjson.dumps({'node_id': f'{p}-1', 'content': 'one, edited'}).decode()}",
        '/tool finish {"result": "done"}',
    ]
    options = SessionOptions.conversation("ft", [root]).with_changes(
        mode=AgentMode.free_time(), channel={"instructions": "\n".join(lines)}
    )
    snaps: list[dict[str, Any]] = []

    async def checkpoint(snap: dict[str, Any]) -> None:
        snaps.append(snap)

    session = await Session.open(
        session_id=f"ft-{p}", system_prompt="p", runtime=RuntimeModel(model="m", context_window_tokens=10_000),
        options=options, journal=InMemoryJournal(), provider=ScriptedProvider(directives=True), knowledge=store,
        tools=builtin_registry(), take_policy=SameSessionOnly(), leases=LeaseRegistry(),
    )
    await session.stage_free_time_opening(checkpoint=checkpoint)
    before_commit = len(await store.children(root))
    assert await session.run_pending_turn("op", checkpoint) is None
    assert before_commit == 0
    assert session.completed and snaps[-1]["commit"]["op_count"] == 3
    node = await store.get_node(f"{p}-1")
    assert (node.content, node.version) == ("one, edited", 1)
    assert len(await store.children(f"{p}-1")) == 1
    resolved = await session.resolve_object(f"{p}-img")
    assert (resolved.data, resolved.transport_kind) == (b"PNG", "photo")

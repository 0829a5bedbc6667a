"""Manager: record_inbound — filing, backfill, claimants, waiting and sharing (SM-3, SM-12, SM-17, SM-28)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from core.sessions.incoming_message import ChatScope, IncomingMessage, Sender
from core.sessions.manager import SessionManager
from core.sessions.platforms import AdapterInstance
from core.sessions.records import OriginChat
from tests.fakes.session_repo import InMemorySessionRepository, RecordingEventSink
from tests.waiting import wait_for

from .conftest import ManagerFactory, new_id

TG = AdapterInstance("tg-main", "telegram", "telegram-bot", claims=("tg:*",), chat_scopes={"group": True, "private": False})
TG_SECOND = AdapterInstance("tg-second", "telegram", "telegram-bot", claims=("tg:*",))
QQ_GREEDY = AdapterInstance("qq-1", "qq", "qq-bot", claims=("tg:shared:*",))


def group_message(session_id: str | None, *, platform: str = "telegram", name: str | None = "Team", multi: bool = True,
                  source: str | None = None, target: str = "g-1", instance: str | None = None) -> IncomingMessage:
    return IncomingMessage(
        id=new_id("m"),
        session_id=session_id,
        platform=platform,
        instance=instance,
        self_id="bot-a",
        chat=ChatScope("group", target, multi, name=name),
        sender=Sender("u-1", "Alice"),
        source=source,
        text="hi",
    )


def dm_message(session_id: str, user: str, *, declared: bool = True) -> IncomingMessage:
    return IncomingMessage(
        id=new_id("m"), session_id=session_id, platform="telegram",
        chat=ChatScope("private", user, False, declared_one_to_one=declared), sender=Sender(user, "Bob"),
    )


@pytest.mark.rule("SM-3", "SM-1", "SM-28")
async def test_first_native_inbound_files_a_room_with_its_declared_chat_scope(
    make_manager: ManagerFactory, sink: RecordingEventSink, repo: InMemorySessionRepository
) -> None:
    # SM-3, SM-1, SM-28
    manager = await make_manager([TG])
    sid = new_id("tg:group")
    # the adapter's declaration (group = multi-party) wins over the message's flag
    await manager.record_inbound(group_message(sid, multi=False))
    record = manager.get_session(sid)
    assert record is not None and record.kind == "room"
    assert record.origin_platform == "telegram"
    assert record.origin_chat == OriginChat("group", True, "g-1", "bot-a", "Team")
    assert repo.sessions[sid].origin_chat == record.origin_chat
    assert sink.pairs() == [(sid, "session.created")]
    window = manager.get_place("telegram:group:g-1")
    assert window is not None and (window.kind, window.name) == ("window", "Team")


@pytest.mark.rule("SM-3")
async def test_origin_never_changes_after_filing(make_manager: ManagerFactory) -> None:
    # SM-3
    manager = await make_manager()
    sid = new_id("web:group")
    await manager.record_inbound(group_message(sid, multi=True))
    first = manager.get_session(sid)
    await manager.record_inbound(group_message(sid, multi=False, target="g-other", platform="telegram"))
    await manager.drain()
    assert manager.get_session(sid).origin_chat == first.origin_chat  # type: ignore[union-attr]


@pytest.mark.rule("SM-3", "SM-17")
async def test_source_bearing_sessionless_and_child_messages_record_nothing(
    manager: SessionManager, sink: RecordingEventSink
) -> None:
    # SM-3, SM-17
    relayed = new_id()
    await manager.record_inbound(group_message(relayed, source="relay"))
    await manager.record_inbound(group_message(None))
    parent = await manager.create_session()
    child = await manager.create_child_session(parent.id)
    sink.clear()
    await manager.record_inbound(group_message(child.id))
    assert manager.get_session(relayed) is None
    assert manager.get_session(child.id).origin_platform is None  # type: ignore[union-attr]
    assert sink.events == []


@pytest.mark.rule("SM-3", "SM-18")
async def test_an_unfiled_root_is_backfilled_by_a_claiming_platforms_native_inbound(
    make_manager: ManagerFactory, sink: RecordingEventSink
) -> None:
    # SM-3, SM-18
    manager = await make_manager([TG])
    sid = new_id("tg:group")
    await manager.ensure_session(sid)
    unclaimed = new_id("other")
    await manager.ensure_session(unclaimed)
    sink.clear()
    await manager.record_inbound(group_message(sid))
    await manager.record_inbound(group_message(unclaimed))  # telegram is configured but does not claim it
    record = manager.get_session(sid)
    assert record is not None and record.origin_platform == "telegram" and record.origin_instance == "tg-main"
    assert manager.get_session(unclaimed).origin_platform is None  # type: ignore[union-attr]
    assert sink.pairs() == [(sid, "session.updated")]


@pytest.mark.rule("SM-3")
async def test_an_id_claimed_by_several_platforms_is_neither_filed_nor_backfilled(make_manager: ManagerFactory) -> None:
    # SM-3
    manager = await make_manager([TG, QQ_GREEDY])
    new_room = new_id("tg:shared:")
    await manager.record_inbound(group_message(new_room))
    assert manager.get_session(new_room) is None
    unfiled = new_id("tg:shared:")
    await manager.ensure_session(unfiled)
    await manager.record_inbound(group_message(unfiled))
    assert manager.get_session(unfiled).origin_platform is None  # type: ignore[union-attr]


@pytest.mark.rule("SM-3")
async def test_origin_is_never_derived_from_the_id(make_manager: ManagerFactory) -> None:
    # SM-3
    manager = await make_manager()
    sid = "telegram:group:" + new_id()
    await manager.ensure_session(sid)
    restarted = await make_manager()
    record = restarted.get_session(sid)
    assert record is not None and record.origin_platform is None and record.kind == "owner"


@pytest.mark.rule("SM-12")
async def test_origin_instance_is_the_first_claimant_or_the_platform_itself_without_set_up(
    make_manager: ManagerFactory,
) -> None:
    # SM-12
    manager = await make_manager([TG, TG_SECOND])
    claimed = new_id("tg:group")
    await manager.record_inbound(group_message(claimed))
    assert manager.get_session(claimed).origin_instance == "tg-main"  # type: ignore[union-attr]
    bare = await make_manager([])
    with_instance, plain = new_id("d"), new_id("d")
    await bare.record_inbound(group_message(with_instance, platform="discord", instance="discord-7"))
    await bare.record_inbound(group_message(plain, platform="discord"))
    assert bare.get_session(with_instance).origin_instance == "discord-7"  # type: ignore[union-attr]
    assert bare.get_session(plain).origin_instance == "discord"  # type: ignore[union-attr]


@pytest.mark.rule("SM-12")
async def test_origin_instance_is_resolved_on_a_later_inbound_once_a_claimant_appears(
    make_manager: ManagerFactory, sink: RecordingEventSink, repo: InMemorySessionRepository
) -> None:
    # SM-12
    late = AdapterInstance("tg-late", "telegram", claims=())
    manager = await make_manager([late])
    sid = new_id("tg:group")
    await manager.record_inbound(group_message(sid))
    assert manager.get_session(sid).origin_instance is None  # type: ignore[union-attr]
    manager.registry.register(AdapterInstance("tg-late", "telegram", claims=(sid,)))
    sink.clear()
    writes = len(repo.applied)
    await asyncio.gather(*(manager.record_inbound(group_message(sid, name=None)) for _ in range(5)))
    assert manager.get_session(sid).origin_instance == "tg-late"  # type: ignore[union-attr]
    assert repo.sessions[sid].origin_instance == "tg-late"
    assert sink.pairs() == [(sid, "session.updated")]
    assert len(repo.applied) == writes + 1  # never two resolutions in flight


@pytest.mark.rule("SM-17")
async def test_concurrent_calls_for_one_session_share_one_recording(
    make_manager: ManagerFactory, repo: InMemorySessionRepository, sink: RecordingEventSink
) -> None:
    # SM-17
    manager = await make_manager()
    sid = new_id("tg")
    repo.gate = asyncio.Event()
    calls = [asyncio.create_task(manager.record_inbound(group_message(sid))) for _ in range(4)]
    # wait until the first call is writing
    await wait_for(lambda: manager._recorder._in_flight, timeout_s=5, interval_s=0, what="the first recording")
    assert not any(c.done() for c in calls)  # resolves only after the filing is stored
    repo.gate.set()
    await asyncio.gather(*calls)
    assert sink.pairs() == [(sid, "session.created")]
    assert sum(1 for change in repo.applied for r in change.sessions if r.id == sid) == 1


@pytest.mark.rule("SM-17")
async def test_a_failed_recording_is_a_warning_not_a_rejection(
    make_manager: ManagerFactory, repo: InMemorySessionRepository, caplog: pytest.LogCaptureFixture
) -> None:
    # SM-17
    manager = await make_manager()
    repo.fail_writes = True
    sid = new_id("tg")
    with caplog.at_level(logging.WARNING):
        await manager.record_inbound(group_message(sid))
    assert manager.get_session(sid) is None
    assert any(r.levelno == logging.WARNING and sid in r.getMessage() for r in caplog.records)


@pytest.mark.rule("SM-17", "SM-22")
async def test_inbound_waits_for_an_in_progress_deletion_and_is_the_new_generation(manager: SessionManager) -> None:
    # SM-17, SM-22
    sid = new_id("tg")
    await manager.record_inbound(group_message(sid))
    old_generation = manager.generation_of(sid)
    release = asyncio.Event()
    clearing = asyncio.Event()

    async def slow_clear(_session_ids: Sequence[str]) -> None:
        clearing.set()
        await release.wait()

    manager.set_clear_session_data(slow_clear)
    deletion = asyncio.create_task(manager.delete_session(sid))
    await clearing.wait()
    arrival = asyncio.create_task(manager.record_inbound(group_message(sid, source="relay")))
    native = asyncio.create_task(manager.record_inbound(group_message(sid)))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not arrival.done() and not native.done()
    assert manager.generation_of(sid) != old_generation
    release.set()
    await asyncio.gather(deletion, arrival, native)
    refiled = manager.get_session(sid)
    assert refiled is not None and refiled.origin_platform == "telegram"
    assert manager.generation_of(sid) != old_generation


@pytest.mark.rule("SM-28", "SM-17")
async def test_windows_are_renamed_by_later_inbound_from_the_origin_platform_only(make_manager: ManagerFactory) -> None:
    # SM-28, SM-17
    manager = await make_manager()
    sid = new_id("tg")
    await manager.record_inbound(group_message(sid, name="Old name"))
    await manager.record_inbound(group_message(sid, name="New name"))
    await manager.drain()  # the refresh is not awaited by record_inbound
    assert manager.get_place("telegram:group:g-1").name == "New name"  # type: ignore[union-attr]
    await manager.record_inbound(group_message(sid, name="From elsewhere", platform="webui"))
    await manager.drain()
    assert manager.get_place("telegram:group:g-1").name == "New name"  # type: ignore[union-attr]


@pytest.mark.rule("SM-28", "SM-27")
async def test_the_owners_dm_gets_no_window_but_a_strangers_dm_does(make_manager: ManagerFactory) -> None:
    # SM-28, SM-27
    manager = await make_manager([TG], owners=[("telegram", "owner-1")])
    owner_dm, stranger_dm = new_id("tg:dm"), new_id("tg:dm")
    await manager.record_inbound(dm_message(owner_dm, "owner-1"))
    await manager.record_inbound(dm_message(stranger_dm, "u-9"))
    assert manager.place_of(owner_dm).key == "workspace:default"
    assert manager.get_place("telegram:private:owner-1") is None
    window = manager.get_place("telegram:private:u-9")
    assert window is not None and window.name == "Bob"
    assert manager.place_of(stranger_dm).key == "telegram:private:u-9"
    assert manager.room_class(owner_dm) == "owner-only" and manager.room_class(stranger_dm) == "room"

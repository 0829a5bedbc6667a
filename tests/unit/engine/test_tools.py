"""Tools: registry, delivery names, transcription prompt, history take rules, files, leases."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import orjson
import pytest

from core.engine import (
    AgentMode,
    JournalHistoryReader,
    SessionOptions,
    TakeVerdict,
    WorkBinding,
    validate_delivery_file_name,
)
from core.engine.tools import builtin_registry, validate_arguments
from core.engine.tools.session_tools import check_transcription_prompt
from core.errors import Forbidden, InvalidInput, NotFound

from .conftest import Recorder, SessionFactory


def _tool_results(session) -> list[dict]:
    return [i["payload"] for i in session.transcript if i["kind"] == "tool_result"]


def _script(*lines: str) -> str:
    return "\n".join(lines)


def _call(name: str, args: dict) -> str:
    return f"/tool {name} {orjson.dumps(args).decode()}"


@pytest.mark.rule("KS-12")
@pytest.mark.parametrize(
    "name", ["", " ", "../x", "a/b.txt", "a\\b", "..", "bad\x00.txt", "line\nbreak.txt", "x" * 256, " lead.txt", "rtl\u202e.txt"]
)
def test_delivery_file_name_rejects_unsafe_names(name: str) -> None:
    # KS-12
    with pytest.raises(InvalidInput):
        validate_delivery_file_name(name)


@pytest.mark.rule("KS-12")
def test_delivery_file_name_accepts_plain_names() -> None:
    # KS-12
    for name in ("report.pdf", "résumé 2025.docx", "数据.csv", "a" * 255):
        assert validate_delivery_file_name(name) == name


@pytest.mark.rule("KS-12")
async def test_send_object_validates_the_file_name_and_stages_the_object(make_session: SessionFactory) -> None:
    # KS-12, KS-11
    session = await make_session()
    await session.begin_user_turn(_script(
        _call("send_object", {"file_name": "../etc/passwd", "text": "x"}),
        _call("send_object", {"file_name": "hello.txt", "media_type": "text/plain", "text": "hello"}),
        "/say sent",
    ))
    assert await session.run_pending_turn("op", Recorder()) == "sent"
    bad, good = _tool_results(session)
    assert not bad["ok"] and "invalid" in bad["content"]
    assert good["ok"]
    [obj] = [o for o in session.turn_outputs if o.kind == "object"]
    resolved = await session.resolve_object(obj.object_id)
    assert (resolved.data, resolved.file_name, resolved.media_type, resolved.transport_kind) == (
        b"hello", "hello.txt", "text/plain", "document",
    )


@pytest.mark.rule("KS-11")
async def test_resolve_object_reads_pending_bytes_after_restore(make_session: SessionFactory) -> None:
    # KS-11: bytes live in the journal, not the snapshot
    session = await make_session()
    data = base64.b64encode(bytes(range(256))).decode()
    await session.begin_user_turn(_call("send_object", {"file_name": "b.bin", "data_base64": data}))
    await session.run_pending_turn("op", Recorder())
    object_id = session.turn_outputs[0].object_id
    assert "data_b64" not in orjson.dumps(session.snapshot()).decode()
    reopened = await make_session(restored=session.snapshot())
    assert (await reopened.resolve_object(object_id)).data == bytes(range(256))


@pytest.mark.rule("KS-11")
async def test_resolve_canonical_object_stages_nothing(make_session: SessionFactory, knowledge) -> None:
    # KS-11
    from core.engine.knowledge import KnowledgeObject

    knowledge.objects["kobj-1"] = KnowledgeObject(
        object_id="kobj-1", node_id="root", file_name="pic.png", media_type="image/png", data=b"\x89PNG"
    )
    session = await make_session()
    before = session.snapshot()
    resolved = await session.resolve_object("kobj-1")
    assert (resolved.data, resolved.transport_kind) == (b"\x89PNG", "photo")
    assert session.snapshot() == before
    with pytest.raises(NotFound):
        await session.resolve_object("nope")


@pytest.mark.rule("KS-13")
@pytest.mark.parametrize("prompt", ["", "   ", "\n\t", None, 5])
def test_transcription_prompt_must_be_non_blank_string(prompt: object) -> None:
    # KS-13
    with pytest.raises(InvalidInput):
        check_transcription_prompt(prompt)


@pytest.mark.rule("KS-13")
async def test_transcribe_audio_passes_prompt_unchanged_without_length_cap(make_session: SessionFactory) -> None:
    # KS-13
    seen: list[str] = []
    from core.providers import ScriptedProvider

    class Spy(ScriptedProvider):
        async def transcribe(self, audio, media_type, prompt, *, model):
            seen.append(prompt)
            return await super().transcribe(audio, media_type, prompt, model=model)

    session = await make_session(provider=Spy(directives=True))
    long_prompt = "  names: Ada, Grace " + "x" * 50_000 + "  "
    attachment = {"id": "voice-1", "file_name": "v.ogg", "media_type": "audio/ogg",
                  "data_base64": base64.b64encode(b"hello from audio").decode()}
    await session.begin_user_turn(_script(
        _call("transcribe_audio", {"object_id": "voice-1", "prompt": long_prompt}),
        _call("transcribe_audio", {"object_id": "voice-1", "prompt": "   "}),
        "/say ok",
    ), {"attachments": [attachment]})
    await session.run_pending_turn("op", Recorder())
    assert seen == [long_prompt]
    ok, blank = _tool_results(session)
    assert ok["ok"] and ok["content"] == "hello from audio"
    assert not blank["ok"] and "blank" in blank["content"]
    assert session.usage_total.input_tokens > 0


async def test_tools_are_authorised_per_mode(make_session: SessionFactory) -> None:
    registry = builtin_registry()
    conversation = {t.name for t in registry.specs_for("conversation", has_work=False)}
    assert "reply" in conversation and "knowledge_write" not in conversation and "finish" not in conversation
    assert "read_file" not in conversation
    free = {t.name for t in registry.specs_for("free_time", has_work=True)}
    assert {"finish", "knowledge_write", "read_file"} <= free and "reply" not in free
    session = await make_session()
    await session.begin_user_turn(_script(_call("finish", {}), "/say no"))
    await session.run_pending_turn("op", Recorder())
    [result] = _tool_results(session)
    assert not result["ok"] and "forbidden" in result["content"]


def test_argument_validation() -> None:
    schema = builtin_registry().get("send_object").parameters
    validate_arguments(schema, {"file_name": "a", "text": "b"})
    for bad in ({}, {"file_name": 3}, {"file_name": "a", "extra": 1}):
        with pytest.raises(InvalidInput):
            validate_arguments(schema, bad)


class Policy:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str | None]] = []

    def can_take(self, current_id: str, target_id: str, principal: str | None) -> TakeVerdict:
        self.asked.append((current_id, target_id, principal))
        return TakeVerdict(ok=target_id == "allowed", reason=None if target_id == "allowed" else "needs read_others_dms")


async def test_read_session_history_goes_through_the_take_policy(make_session: SessionFactory, journal) -> None:
    other = await make_session(session_id="allowed")
    await other.begin_user_turn("secret plan")
    await other.run_pending_turn("op", Recorder())
    policy = Policy()
    session = await make_session(take_policy=policy, history_reader=JournalHistoryReader(journal))
    await session.begin_user_turn(_script(
        _call("read_session_history", {"session_id": "allowed"}),
        _call("read_session_history", {"session_id": "denied"}),
        "/say ok",
    ), {"principal": "user-7"})
    await session.run_pending_turn("op", Recorder())
    allowed, denied = _tool_results(session)
    assert allowed["ok"] and "secret plan" in allowed["content"]
    assert not denied["ok"] and "needs read_others_dms" in denied["content"]
    assert policy.asked == [(session.session_id, "allowed", "user-7"), (session.session_id, "denied", "user-7")]


def _work_options(tmp_path: Path) -> SessionOptions:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("alpha")
    extra = tmp_path / "extra"
    extra.mkdir()
    (tmp_path / "secret.txt").write_text("nope")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    work = WorkBinding(root=str(root), extra_roots=(str(extra),), current_dir=str(root / "src"))
    return SessionOptions.conversation("proj", ["root"]).with_changes(work=work)


async def test_file_tools_are_confined_to_the_work_binding(make_session: SessionFactory, tmp_path: Path) -> None:
    session = await make_session(options=_work_options(tmp_path))
    await session.begin_user_turn(_script(
        _call("read_file", {"path": "a.txt"}),
        _call("read_file", {"path": "../../secret.txt"}),
        _call("read_file", {"path": "../link.txt"}),
        _call("write_file", {"path": str(tmp_path / "extra" / "n.txt"), "content": "new"}),
        _call("list_dir", {"path": ".."}),
        "/say ok",
    ))
    await session.run_pending_turn("op", Recorder())
    read, escape, symlink, write, listing = _tool_results(session)
    assert read["content"] == "alpha"
    assert not escape["ok"] and "forbidden" in escape["content"]
    assert not symlink["ok"] and "forbidden" in symlink["content"]
    assert write["ok"] and (tmp_path / "extra" / "n.txt").read_text() == "new"
    assert listing["content"].splitlines() == ["link.txt", "src/"]


@pytest.mark.rule("KS-19")
async def test_release_managed_sources_releases_session_leases(
    make_session: SessionFactory, leases, tmp_path: Path
) -> None:
    # KS-19
    options = _work_options(tmp_path)
    writer = await make_session(options=options)
    await writer.begin_user_turn(_call("write_file", {"path": "out.txt", "content": "1"}))
    await writer.run_pending_turn("op", Recorder())
    target = os.path.realpath(tmp_path / "proj" / "src" / "out.txt")  # noqa: ASYNC240 (resolves a path in the test's tmp_path)
    assert await leases.held_by(writer.state.managed_source_session_id) == [target]
    other = await make_session(options=options, session_id="other")
    await other.begin_user_turn(_call("write_file", {"path": "out.txt", "content": "2"}))
    await other.run_pending_turn("op", Recorder())
    assert "conflict" in _tool_results(other)[0]["content"]
    assert await writer.release_managed_sources() == 1
    assert await leases.held_by(writer.state.managed_source_session_id) == []
    await other.begin_user_turn(_call("write_file", {"path": "out.txt", "content": "2"}))
    await other.run_pending_turn("op-2", Recorder())
    assert _tool_results(other)[-1]["ok"]
    assert Path(target).read_text() == "2"  # noqa: ASYNC240 (the one-byte file the tool wrote)


async def test_file_tools_without_binding_are_forbidden(make_session: SessionFactory) -> None:
    from core.engine.tools.file_tools import confine

    with pytest.raises(Forbidden):
        confine(None, "x")
    options = SessionOptions.conversation("a", []).with_changes(mode=AgentMode.free_time())
    session = await make_session(options=options)
    assert session.state.work is None

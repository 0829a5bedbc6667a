"""SM-1 kinds, SM-2 labels as text objects, SM-18 unfiled roots."""

from __future__ import annotations

from datetime import UTC
from zoneinfo import ZoneInfo

import pytest

from core.sessions.records import DEFAULT_WORKSPACE_KEY, PlaceRecord, WorkBinding
from core.sessions.rules import is_unfiled, place_label, session_kind, session_label
from core.sessions.text import TextRef

from .records_for_tests import T0, rec


@pytest.mark.rule("SM-1")
@pytest.mark.parametrize(
    ("parent_id", "origin_platform", "kind"),
    [
        ("p", None, "task"),  # SM-1: a parent makes a task, even with an origin
        ("p", "telegram", "task"),
        (None, "telegram", "room"),
        (None, None, "owner"),
    ],
)
def test_kind_comes_from_parent_then_origin(parent_id: str | None, origin_platform: str | None, kind: str) -> None:
    # SM-1
    assert session_kind(parent_id, origin_platform) == kind


@pytest.mark.rule("SM-2")
def test_a_named_session_is_labelled_by_its_name() -> None:
    # SM-2
    label = session_label(rec("a", name="Planning"))
    assert label.render("en", UTC) == "Planning"
    assert label.render("zh", UTC) == "Planning"


@pytest.mark.rule("SM-2")
def test_an_unnamed_root_reads_session_and_date_time_with_year_in_the_readers_language() -> None:
    # SM-2
    label = session_label(rec("a", created_at=T0))
    assert isinstance(label, TextRef) and label.key == "session.label.root"
    assert label.render("en", UTC) == "Session 2026-11-02 12:00"
    assert label.render("zh", UTC) == "会话 2026-11-02 12:00"
    assert label.render("zh-CN", ZoneInfo("Asia/Shanghai")) == "会话 2026-11-02 20:00"


@pytest.mark.rule("SM-2")
def test_an_unnamed_child_reads_subtask_and_short_time() -> None:
    # SM-2
    label = session_label(rec("c", parent_id="a", created_at=T0))
    assert label.render("en", UTC) == "Subtask 12:00"
    assert label.render("zh", UTC) == "子任务 12:00"
    assert label.source(UTC) == "Subtask 12:00"


@pytest.mark.rule("SM-2")
def test_the_model_gets_the_source_form_in_the_service_time_zone() -> None:
    # SM-2
    # The zone is always the service's (TURNSTILE_TIME_ZONE), never the process's local one:
    # a zone with a half-hour offset cannot match a machine zone by accident.
    label = session_label(rec("a", created_at=T0))
    assert label.source(ZoneInfo("Asia/Kolkata")) == "Session 2026-11-02 17:30"
    assert session_label(rec("c", parent_id="a", created_at=T0)).source(ZoneInfo("Asia/Kolkata")) == "Subtask 17:30"


@pytest.mark.rule("SM-2")
def test_the_default_workspace_is_labelled_default_workspace() -> None:
    # SM-2
    place = PlaceRecord(key=DEFAULT_WORKSPACE_KEY, kind="workspace", created_at=T0, updated_at=T0)
    assert place_label(place).render("en") == "Default workspace"
    assert place_label(place).render("zh") == "默认工作区"
    named = PlaceRecord(key="telegram:group:1", kind="window", name="Team", created_at=T0, updated_at=T0)
    assert place_label(named).render("zh") == "Team"


@pytest.mark.rule("SM-18")
@pytest.mark.parametrize(
    ("fields", "unfiled"),
    [
        ({}, True),
        ({"origin_platform": "telegram"}, False),
        ({"created_from": "webui"}, False),
        ({"work": WorkBinding("/srv/repo")}, False),
    ],
)
def test_unfiled_means_no_origin_no_created_from_no_binding(fields: dict[str, object], unfiled: bool) -> None:
    # SM-18
    assert is_unfiled(rec("r", **fields)) is unfiled

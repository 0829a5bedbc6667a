"""The AsyncAPI 3.0 document: generated from the models, every channel covered, structurally valid."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from faststream.specification.asyncapi.v3_0_0.schema import ApplicationSchema

from consumers.catalog import operation_specs
from schemas.events import EVENT_DATA
from schemas.export import all_documents, render
from tests.unit.contract.paths import SCHEMAS_DIR


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    document = all_documents()["asyncapi"]
    return document  # type: ignore[return-value]


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [value["$ref"]] if isinstance(value.get("$ref"), str) else []
        return found + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, f"unresolved $ref {ref}"
        node = node[part]
    return node


def test_required_fields_of_asyncapi_3(doc: dict[str, Any]) -> None:
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] and doc["info"]["version"]
    # FastStream's own AsyncAPI 3.0 object model (its Server wants a pathname the spec leaves optional)
    ApplicationSchema.model_validate({k: v for k, v in doc.items() if k != "servers"})
    assert all({"host", "protocol"} <= set(server) for server in doc["servers"].values())
    key = re.compile(r"^[A-Za-z0-9.\-_]+$")
    for section in ("schemas", "messages"):
        assert all(key.match(k) for k in doc["components"][section]), section
    for cid, channel in doc["channels"].items():
        assert key.match(cid)
        assert "address" in channel and isinstance(channel["messages"], dict)
        for name in re.findall(r"{([^}]+)}", channel["address"] or ""):
            assert name in channel.get("parameters", {}), f"{cid}: parameter {name} undeclared"
    for oid, operation in doc["operations"].items():
        assert operation["action"] in ("send", "receive"), oid
        channel_ref = operation["channel"]["$ref"]
        assert all(m["$ref"].startswith(channel_ref + "/messages/") for m in operation["messages"]), oid
        if "reply" in operation:
            reply_ref = operation["reply"]["channel"]["$ref"]
            assert all(m["$ref"].startswith(reply_ref + "/messages/") for m in operation["reply"]["messages"]), oid
    for message in doc["components"]["messages"].values():
        assert message["payload"] and message["contentType"] == "application/json"


def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    refs = _refs(doc)
    assert len(refs) > 100
    for ref in set(refs):
        _resolve(doc, ref)


def test_every_channel_is_covered(doc: dict[str, Any]) -> None:
    channels = doc["channels"]
    addresses = {c["address"] for c in channels.values()}
    assert {
        "{prefix}.inbound.{platform}.{sid}", "{prefix}.outbound.{platform}.{sid}", "{prefix}.checkpoint.{sid}",
        "{prefix}.events.{sid}.{type}", "{prefix}.dlq.inbound", "{prefix}.dlq.turn",
    } <= addresses
    for spec in operation_specs():
        assert "{prefix}.api." + spec.name in addresses, spec.name
        operation = doc["operations"]["api_" + spec.name.replace(".", "_")]
        assert operation["action"] == "receive" and operation["reply"]["messages"]
    assert set(channels["events"]["messages"]) == {t.replace(".", "_") for t in EVENT_DATA}
    assert doc["operations"]["inbound"]["action"] == "receive"
    for sent in ("outbound", "checkpoint", "events", "dlq_inbound", "dlq_turn"):
        assert doc["operations"][sent]["action"] == "send"


def test_checkpoint_snapshot_and_event_data_are_typed(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    checkpoint = _resolve(doc, doc["components"]["messages"]["checkpoint"]["payload"]["$ref"])
    snapshot = _resolve(doc, checkpoint["properties"]["snapshot"]["$ref"])
    assert {"format_version", "state_version", "session_id"} <= set(snapshot["properties"])
    ended = _resolve(doc, doc["components"]["messages"]["turn_ended"]["payload"]["$ref"])
    data = _resolve(doc, ended["properties"]["data"]["$ref"])
    assert {"outcome", "error", "turn_id", "generation"} <= set(data["properties"])
    reply = doc["components"]["messages"]["session_list_reply"]["payload"]
    ok = _resolve(doc, reply["anyOf"][0]["$ref"])
    assert ok["properties"]["result"]["items"]["$ref"] == "#/components/schemas/SessionOut"
    assert "ControlError" in schemas


def test_exported_documents_are_up_to_date() -> None:
    """`make schemas` output is committed: docs/schemas/ equals what the models generate now."""
    stale = [
        name for name, document in all_documents().items()
        if not (SCHEMAS_DIR / f"{name}.json").is_file()
        or orjson.loads((SCHEMAS_DIR / f"{name}.json").read_bytes()) != orjson.loads(render(document))
    ]
    assert not stale, f"run `make schemas`: stale or missing {stale}"

"""The docs stay true to the code: every setting, control operation and make target is documented."""

from __future__ import annotations

import re
from pathlib import Path

from consumers.catalog import declared_operations
from consumers.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text()
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def test_every_setting_is_documented_with_its_variable() -> None:
    missing = [name for name in Settings.model_fields if f"TURNSTILE_{name.upper()}" not in PROTOCOL]
    assert missing == []


def test_every_control_operation_has_a_section_in_the_protocol() -> None:
    operations = declared_operations()
    names = {f"{op.resource}.{op.verb}" for op in operations}
    assert len(names) == len(operations), "an operation is registered twice"
    headings = set(re.findall(r"^#+ (.+)$", PROTOCOL, flags=re.M))
    documented = {part.strip() for h in headings for part in h.split("/")}
    # "knowledge.get / knowledge.list" documents both
    assert sorted(names - documented) == []


def test_readme_commands_exist_in_the_makefile() -> None:
    for target in re.findall(r"make ([a-z-]+)", README):
        assert re.search(rf"^{re.escape(target)}:", MAKEFILE, flags=re.M), f"make {target} is not a target"

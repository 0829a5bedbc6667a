"""Every rule ID of the spec (SM-…, KS-…, MQ-…) is named by at least one test's ``rule`` marker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT.parent / "shared" / "SPEC.md"


def _rule_ids_in_spec() -> set[str]:
    return set(re.findall(r"\b((?:SM|KS|MQ)-\d+)\b", SPEC.read_text()))


def _rule_ids_in_tests() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for args in re.findall(r"mark\.rule\(([^)]*)\)", path.read_text()):
            found.update(re.findall(r"(?:SM|KS|MQ)-\d+", args))
    return found


@pytest.mark.skipif(not SPEC.exists(), reason="shared/SPEC.md is not beside the repository")
def test_every_spec_rule_is_named_by_a_test() -> None:
    missing = sorted(_rule_ids_in_spec() - _rule_ids_in_tests(), key=lambda r: (r[:2], int(r[3:])))
    assert missing == [], f"rules no test names: {missing}"

"""nats.conf's roles are the ones derived from the subject names, and hold no secret."""

from __future__ import annotations

import subprocess
from pathlib import Path

from consumers.nats_server import nats_server_binary
from schemas.nats_roles import (
    adapter_role,
    observer_role,
    production_example,
    with_dev_authorization,
    without_roles,
)
from schemas.subjects import Subjects

ROOT = Path(__file__).resolve().parents[2]


def test_nats_conf_roles_are_generated_from_the_subjects_and_passwords_come_from_the_environment() -> None:
    conf = (ROOT / "nats.conf").read_text()
    assert with_dev_authorization(conf) == conf, "regenerate: python -m schemas.nats_roles nats.conf"
    assert "password: $TURNSTILE_DEV_PW_" in conf and 'password: "' not in conf
    assert "store_dir" not in without_roles(conf) and "authorization" not in without_roles(conf)


def test_an_adapter_may_use_only_its_platform_and_an_observer_no_mutating_verb() -> None:
    subjects = Subjects()
    adapter = adapter_role(subjects, "telegram")
    assert all(".telegram." in s or s.endswith(".telegram") or ".api.platform." in s for s in adapter.publish)
    assert not any(s.startswith(subjects.checkpoint_all[:-1]) for s in adapter.publish + adapter.subscribe)
    observer = observer_role(subjects)
    verbs = {s.removeprefix("turnstile.api.") for s in observer.publish if s.startswith("turnstile.api.")}
    assert verbs.isdisjoint({"session.delete", "session.update", "memory.clear", "platform.register"})


def test_the_production_example_is_current_and_holds_no_password() -> None:
    example = (ROOT / "docs" / "nats-production.conf").read_text()
    assert example == production_example(), "regenerate: python -m schemas.nats_roles --production docs/nats-production.conf"
    assert example.count('password: "REPLACE_WITH_BCRYPT_HASH"') == example.count("{ user:") == 5


def test_the_production_example_is_a_config_nats_server_accepts(tmp_path: Path) -> None:
    example = (ROOT / "docs" / "nats-production.conf").read_text()
    head, _, rest = example.partition("tls {")
    config = tmp_path / "production.conf"
    config.write_text((head + rest.partition("}")[2]).replace("/var/lib/nats", str(tmp_path / "store")))
    checked = subprocess.run([nats_server_binary(), "-t", "-c", str(config)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr

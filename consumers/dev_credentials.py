"""Development credentials for ``make run``'s nats-server: one generated password per role, kept under var/.

``ensure_dev_credentials`` writes ``var/dev-credentials/<user>.env`` once (mode 0600; reused on later runs)
with ``TURNSTILE_NATS_USER``, ``TURNSTILE_NATS_PASSWORD`` and ``TURNSTILE_NATS_INBOX_PREFIX``, and
returns the environment nats-server reads the passwords from (``$TURNSTILE_DEV_PW_<USER>`` in nats.conf).
Nothing secret is committed; ``set -a; . var/dev-credentials/admin.env`` gives a shell the admin role,
and the CLI loads a role's file by itself when no credentials are configured (``dev_settings_env``).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from pathlib import Path

from schemas.nats_roles import Role, password_variable

DEV_CREDENTIALS_DIR = Path("var") / "dev-credentials"
CREDENTIAL_VARIABLES = (
    "TURNSTILE_NATS_CREDS_FILE", "TURNSTILE_NATS_NKEY_SEED_FILE", "TURNSTILE_NATS_USER", "TURNSTILE_NATS_TOKEN",
)
_PASSWORD = re.compile(r"dev[0-9a-f]{48}")

log = logging.getLogger(__name__)


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            values[name.strip()] = value.strip()
    return values


def ensure_dev_credentials(roles: tuple[Role, ...], directory: Path) -> dict[str, str]:
    """Create (once) each role's env file under ``directory``; the password variables for nats-server."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    server_env: dict[str, str] = {}
    for role in roles:
        path = directory / f"{role.user}.env"
        password = read_env_file(path).get("TURNSTILE_NATS_PASSWORD", "") if path.exists() else ""
        if not _PASSWORD.fullmatch(password):
            # nats-server parses a $VARIABLE's value as config: letters first, then hex digits only.
            password = "dev" + secrets.token_hex(24)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(
                    f"# {role.user}: {role.summary} (development credentials written by `make run`)\n"
                    f"TURNSTILE_NATS_USER={role.user}\nTURNSTILE_NATS_PASSWORD={password}\n"
                    f"TURNSTILE_NATS_INBOX_PREFIX={role.inbox_prefix}\n"
                )
        server_env[password_variable(role.user)] = password
    return server_env


def dev_settings_env(user: str, directory: Path = DEV_CREDENTIALS_DIR) -> dict[str, str]:
    """A role's development credentials as TURNSTILE_* variables, when none are configured and the file exists."""
    if any(os.environ.get(name) for name in CREDENTIAL_VARIABLES):
        return {}
    path = directory / f"{user}.env"
    if not path.is_file():
        return {}
    log.info("using the development credentials of %s (%s)", user, path)
    return read_env_file(path)

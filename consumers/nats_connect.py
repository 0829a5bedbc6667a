"""How every turnstile connection authenticates to NATS: one place for the service and the CLI.

Settings (all optional; see docs/security.md): ``TURNSTILE_NATS_CREDS_FILE`` (a JWT
``.creds`` file), ``TURNSTILE_NATS_NKEY_SEED_FILE``, ``TURNSTILE_NATS_USER`` with
``TURNSTILE_NATS_PASSWORD``, ``TURNSTILE_NATS_TOKEN``, and TLS with
``TURNSTILE_NATS_TLS_CA_FILE`` / ``_CERT_FILE`` / ``_KEY_FILE``; ``TURNSTILE_NATS_INBOX_PREFIX`` names the
reply subjects (a role may subscribe only to its own, ``_INBOX.<user>.>``). A file that cannot be
read fails the start with one line naming its setting; secrets never appear in messages.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from consumers.settings import Settings
from core.errors import InvalidInput


def redacted_url(url: str) -> str:
    """A server URL fit for a log line: a password or token written into it is replaced."""
    parts = urlsplit(url)
    if parts.password is None and not parts.username:
        return url
    user = parts.username if parts.password is not None else None
    credentials = f"{user}:***" if user else "***"
    host = parts.hostname or ""
    netloc = f"{credentials}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _readable(path: str, variable: str) -> str:
    if not Path(path).is_file():
        raise InvalidInput(f"{variable}: no readable file at {path!r}")
    return path


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """A client TLS context when any TLS setting is given (CA to verify the server; cert and key for mTLS)."""
    ca, cert, key = settings.nats_tls_ca_file, settings.nats_tls_cert_file, settings.nats_tls_key_file
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise InvalidInput("TURNSTILE_NATS_TLS_CERT_FILE and TURNSTILE_NATS_TLS_KEY_FILE go together")
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=_readable(ca, "TURNSTILE_NATS_TLS_CA_FILE") if ca else None
    )
    if cert and key:
        try:
            context.load_cert_chain(
                _readable(cert, "TURNSTILE_NATS_TLS_CERT_FILE"), _readable(key, "TURNSTILE_NATS_TLS_KEY_FILE")
            )
        except ssl.SSLError as exc:
            raise InvalidInput(f"TURNSTILE_NATS_TLS_CERT_FILE / _KEY_FILE: not a certificate and key ({exc.reason})") from exc
    return context


def _credentials(settings: Settings) -> dict[str, Any]:
    """nats-py keyword arguments for the credentials that are not passed as a FastStream security object."""
    options: dict[str, Any] = {"inbox_prefix": settings.nats_inbox_prefix}
    if settings.nats_creds_file:
        options["user_credentials"] = _readable(settings.nats_creds_file, "TURNSTILE_NATS_CREDS_FILE")
    if settings.nats_nkey_seed_file:
        options["nkeys_seed"] = _readable(settings.nats_nkey_seed_file, "TURNSTILE_NATS_NKEY_SEED_FILE")
    token = settings.nats_token.get_secret_value()
    if token:
        options["token"] = token
    if bool(settings.nats_user) != bool(settings.nats_password.get_secret_value()):
        raise InvalidInput("TURNSTILE_NATS_USER and TURNSTILE_NATS_PASSWORD go together")
    return options


def connect_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` (CLI and other plain clients)."""
    options = _credentials(settings)
    if settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password.get_secret_value()
    context = tls_context(settings)
    if context is not None:
        options["tls"] = context
    return options


def broker_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for FastStream's ``NatsBroker`` (user/password and TLS go as a security object)."""
    from faststream.security import BaseSecurity, SASLPlaintext  # the service's only: the CLI starts without FastStream

    options = _credentials(settings)
    context = tls_context(settings)
    if settings.nats_user:
        options["security"] = SASLPlaintext(
            settings.nats_user, settings.nats_password.get_secret_value(), ssl_context=context
        )
    elif context is not None:
        options["security"] = BaseSecurity(ssl_context=context)
    return options

"""The ``turnstile`` command (typer): ``run`` the service; ``send``, ``api``, ``sessions``, ``show``,
``tail`` and ``replay`` as a client. Every error is one line on stderr and a non-zero exit."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import typer
from pydantic import SecretStr, ValidationError

from consumers.cli_api import api_command
from consumers.cli_sessions import sessions_command, show_command
from consumers.cli_stream import replay_command, send_command, tail_command
from consumers.cli_support import EXIT_FAILED, EXIT_REFUSED, Cli, CliError, describe, err
from consumers.dev_credentials import dev_settings_env
from consumers.logs import configure_logging
from consumers.nats_connect import redacted_url
from consumers.settings import Settings
from consumers.startup import EXIT_SETTINGS, StartupError
from consumers.task_stop import cancel_and_wait
from core.errors import TurnstileError

STOP_BOUND_S = 30.0  # beyond the drain timeout: flushing and closing connections
RETRY_DELAY_S = 1.0  # between failed takeovers
OLDER_GC_EVERY = 2_500_000  # allocations between collections of the middle generation (tune_gc)
# A client command with no credentials configured uses its role's `make run` credentials
# (var/dev-credentials/<user>.env, docs/security.md), when present.
DEV_ROLE_OF = {"send": "admin", "api": "admin", "sessions": "observer", "show": "observer", "tail": "observer",
               "replay": "observer"}

app = typer.Typer(
    name="turnstile", help="Chat-agent sessions on NATS JetStream.", no_args_is_help=True,
    add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
)


def _version() -> str:
    try:
        return version("turnstile")
    except PackageNotFoundError:
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        print(f"turnstile {_version()}")
        raise typer.Exit()


@app.callback()
def options(
    ctx: typer.Context,
    server: str | None = typer.Option(None, "--server", envvar="TURNSTILE_NATS_URL", show_envvar=True,
                               help="NATS server URL [default: nats://127.0.0.1:4333]"),
    prefix: str | None = typer.Option(None, "--prefix", envvar="TURNSTILE_PREFIX", show_envvar=True,
                               help="subject prefix [default: turnstile]"),
    creds: Path | None = typer.Option(None, "--creds", envvar="TURNSTILE_NATS_CREDS_FILE", help="NATS .creds file"),  # noqa: B008 - typer declares options as defaults
    nkey_seed: Path | None = typer.Option(None, "--nkey-seed", envvar="TURNSTILE_NATS_NKEY_SEED_FILE",  # noqa: B008 - typer declares options as defaults
                                   help="NATS nkey seed file"),
    user: str | None = typer.Option(None, "--user", envvar="TURNSTILE_NATS_USER", help="NATS user (with --password)"),
    password: str | None = typer.Option(None, "--password", envvar="TURNSTILE_NATS_PASSWORD", show_default=False,
                                 help="NATS password (prefer the variable: a command line is visible to others)"),
    token: str | None = typer.Option(None, "--token", envvar="TURNSTILE_NATS_TOKEN", show_default=False,
                              help="NATS token (prefer the variable)"),
    tls_ca: Path | None = typer.Option(None, "--tls-ca", envvar="TURNSTILE_NATS_TLS_CA_FILE", help="CA file for TLS"),  # noqa: B008 - typer declares options as defaults
    tls_cert: Path | None = typer.Option(None, "--tls-cert", envvar="TURNSTILE_NATS_TLS_CERT_FILE",  # noqa: B008 - typer declares options as defaults
                                  help="client certificate (mutual TLS)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", envvar="TURNSTILE_NATS_TLS_KEY_FILE",  # noqa: B008 - typer declares options as defaults
                                 help="client key (mutual TLS)"),
    json_: bool = typer.Option(False, "--json", help="machine output: JSON (one object or one per line)"),
    _version_flag: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                       help="print the version and exit"),
) -> None:
    """Chat-agent sessions on NATS JetStream. Options also come from the TURNSTILE_* variables."""
    given = {
        "nats_url": server, "prefix": prefix, "nats_user": user,
        "nats_creds_file": str(creds) if creds else None,
        "nats_nkey_seed_file": str(nkey_seed) if nkey_seed else None,
        "nats_password": SecretStr(password) if password else None,
        "nats_token": SecretStr(token) if token else None,
        "nats_tls_ca_file": str(tls_ca) if tls_ca else None,
        "nats_tls_cert_file": str(tls_cert) if tls_cert else None,
        "nats_tls_key_file": str(tls_key) if tls_key else None,
    }
    role = DEV_ROLE_OF.get(ctx.invoked_subcommand or "")
    if role is not None and not any(given[k] for k in ("nats_user", "nats_creds_file", "nats_nkey_seed_file", "nats_token")):
        os.environ.update(dev_settings_env(role))
    try:
        settings = Settings.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        raise CliError(invalid_settings(exc), EXIT_SETTINGS) from None
    configure_logging(settings)
    ctx.obj = Cli(settings, json=json_)


@app.command("run")
def run_command(ctx: typer.Context) -> None:
    """Run the service in the foreground (settings from the TURNSTILE_* variables and the options above)."""
    from consumers.idle_gc import run_collecting_when_idle

    cli: Cli = ctx.obj
    raise typer.Exit(run_collecting_when_idle(_run(cli.settings), cli.settings.gc_idle_threshold))


@app.command("migrate")
def migrate_command(
    ctx: typer.Context,
    allow_foreign_tables: bool = typer.Option(
        False, "--allow-foreign-tables", help="migrate even into a database that holds other applications' tables"
    ),
) -> None:
    """Create or upgrade the database schema (TURNSTILE_DATABASE_URL) and exit."""
    from core.store.migrate import migrate_database

    settings: Settings = ctx.obj.settings
    revision = asyncio.run(
        migrate_database(
            settings.database_url,
            allow_foreign_tables=allow_foreign_tables or settings.database_allow_foreign_tables,
        )
    )
    print(f"database at revision {revision}")

app.command("send")(send_command)
app.command("api", add_help_option=False)(api_command)
app.command("sessions")(sessions_command)
app.command("show")(show_command)
app.command("tail")(tail_command)
app.command("replay")(replay_command)


def main(argv: list[str] | None = None) -> int:
    """The console script and ``python -m consumers.cli``: run, then map every error to one line."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="turnstile", standalone_mode=False)
    except CliError as exc:
        err(f"turnstile: {exc.message}")
        return exc.code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return 130
    except typer.TyperException as exc:  # click's usage errors: one line (the help when no arguments)
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            return EXIT_REFUSED
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        err(f"turnstile: {' '.join(exc.format_message().split())}{hint}")
        return EXIT_REFUSED if isinstance(getattr(exc, "exit_code", 2), int) else EXIT_FAILED
    except TurnstileError as exc:
        err(f"turnstile: {exc.message}")
        return EXIT_REFUSED
    except Exception as exc:  # never a traceback: one line naming what failed
        err(f"turnstile: {describe(exc)}")
        return EXIT_FAILED
    return int(result) if isinstance(result, int) else 0


def invalid_settings(exc: ValidationError) -> str:
    """One line naming each ``TURNSTILE_*`` variable the settings refused."""
    parts = []
    for error in exc.errors():
        name = "_".join(str(p) for p in error.get("loc", ())).upper()
        parts.append(f"TURNSTILE_{name}: {error.get('msg', 'invalid')}")
    return "invalid setting " + "; ".join(parts)


async def _run(settings: Settings) -> int:
    with collector_paused():
        from consumers.service import TurnstileService

    service = TurnstileService(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await serve(service, stop)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while the service's modules import (the client commands never import them).

    Importing allocates only objects that live as long as the process (modules, classes, pydantic
    validators), so a collection then frees nothing; with the default thresholds two full ones ran
    (22-73 ms each, of a ~1 s import). ``tune_gc`` collects once and freezes what start-up made.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def tune_gc(threshold: int) -> None:
    """Collect young garbage every ``threshold`` allocations and older generations rarely.

    A session service keeps many long-lived objects (records, transcripts, memoised
    encodings); with CPython's defaults the cyclic collector walks them over and over
    (measured: ~40% of the CPU per message at 3,000 sessions). Objects alive at start-up
    are frozen out of collection. Reference counting still frees almost everything at once.
    The middle generation is collected every ``OLDER_GC_EVERY`` allocations whatever the
    young threshold, so a small young threshold (short pauses: a young collection stops the
    event loop for as long as it walks the young objects) does not walk the older ones more often.
    """
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, max(1, OLDER_GC_EVERY // threshold), 100)


async def serve(service: object, stop: asyncio.Event) -> int:
    """Start (possibly standing by for the lease), serve until ``stop``, then stop.

    A lost ownership lease (broker away past the TTL, or a pause) does not end the
    process: the service has fenced itself; it is stopped and a fresh one competes for
    ownership again, waiting for the broker as long as it takes. Exit code 0 on a
    requested stop; a refused start (broker, database, provider, settings) logs one
    error line naming the setting and exits with ``StartupError.exit_code`` (2-5,
    ``consumers/startup.py``).
    """
    from consumers.malloc_tuning import tune_malloc  # here: ctypes is ~2.5 ms of every client command's import
    from consumers.service import TurnstileService

    assert isinstance(service, TurnstileService)
    log = logging.getLogger("turnstile")
    tune_gc(service.settings.gc_threshold)
    mmap_threshold = service.settings.malloc_mmap_threshold
    if mmap_threshold and not tune_malloc(mmap_threshold):
        log.info("TURNSTILE_MALLOC_MMAP_THRESHOLD not applied: no glibc mallopt here; the allocator is left as it is")
    patient = False
    while True:
        try:
            outcome = await _serve_term(service, stop, patient, log)
        except Exception as exc:
            if isinstance(exc, StartupError) and not patient:
                log.error("%s", exc)
                await service.stop()
                return exc.exit_code
            if not patient:
                raise
            # The broker went away again while we were taking over: compete afresh.
            log.warning("taking over failed (%r); competing for ownership again", exc)
            await asyncio.gather(service.stop(), return_exceptions=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RETRY_DELAY_S)
            outcome = "stopped" if stop.is_set() else "lost"
        if outcome == "stopped":
            return 0
        log.warning("ownership lost: competing for ownership again (waiting for the broker if it is away)")
        service = TurnstileService(service.settings)
        patient = True


async def _serve_term(service: object, stop: asyncio.Event, patient: bool, log: logging.Logger) -> str:
    """One term of ownership: "stopped" on a requested stop, "lost" when the lease was lost."""
    from consumers.service import TurnstileService

    assert isinstance(service, TurnstileService)
    starting = asyncio.create_task(service.start(patient=patient))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        await cancel_and_wait(starting)  # a standby's KV request can lose one cancel (task_stop.py)
        await service.stop()
        return "stopped"
    stopping.cancel()
    starting.result()
    log.info("turnstile ready on %s (prefix %s)", redacted_url(service.settings.nats_url), service.settings.prefix)
    lost = asyncio.create_task(service.lost.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({lost, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for t in (lost, stopping):
        t.cancel()
    was_lost = service.lost.is_set() and not stop.is_set()
    log.info("stopping")
    # Not wait_for: past the bound it cancels once and then waits as long as the stop runs on.
    stop_bound_s = STOP_BOUND_S + service.settings.drain_timeout_s
    stopping_service = asyncio.create_task(service.stop())
    await asyncio.wait([stopping_service], timeout=stop_bound_s)
    if stopping_service.done():
        stopping_service.result()
    else:
        log.warning("stopping took longer than %.0f s; going on", stop_bound_s)
        await cancel_and_wait(stopping_service)
    log.info("stopped")
    return "lost" if was_lost else "stopped"


if __name__ == "__main__":
    sys.exit(main())

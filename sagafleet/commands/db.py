"""``sagafleet db migrate|url|drop-snapshots`` and ``sagafleet embedded start|status|stop``."""

from __future__ import annotations

import argparse
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from events.saga_log.snapshots import PostgresSnapshots
from sagafleet import embedded, embedded_state, runtime
from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all
from sagafleet.output import emit
from sagafleet.settings import Settings


def register(sub: Any) -> None:
    """Add the ``db`` and ``embedded`` subcommands."""
    db = sub.add_parser("db", help="database schema and URL")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    mig = db_sub.add_parser("migrate", help="apply schema migrations (idempotent)")
    mig.add_argument("--json", action="store_true", help="print one JSON document")
    mig.set_defaults(handler=run_migrate)
    url = db_sub.add_parser("url", help="print the database URL in use (password masked)")
    url.add_argument("--show-password", action="store_true",
                     help="print the password too (it is masked as *** otherwise)")
    url.add_argument("--json", action="store_true", help="print one JSON document")
    url.set_defaults(handler=run_url)
    drop = db_sub.add_parser(
        "drop-snapshots",
        help="delete every snapshot of saga state (loads fold whole logs until new ones "
             "are written; the log, the only truth, is untouched)")
    drop.add_argument("--json", action="store_true", help="print one JSON document")
    drop.set_defaults(handler=run_drop_snapshots)

    emb = sub.add_parser("embedded", help="the embedded PostgreSQL and Redis under SAGAFLEET_HOME")
    emb_sub = emb.add_subparsers(dest="embedded_command", required=True, metavar="ACTION")
    start = emb_sub.add_parser(
        "start", help="start the embedded servers the settings use (those without a URL)")
    start.add_argument("--json", action="store_true", help="print one JSON document")
    start.set_defaults(handler=run_start)
    status = emb_sub.add_parser("status", help="which embedded servers run (starts nothing)")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(handler=run_status)
    stop = emb_sub.add_parser("stop", help="stop the embedded servers cleanly")
    stop.add_argument("--json", action="store_true", help="print one JSON document")
    stop.set_defaults(handler=run_stop)


def run_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Apply every room's migrations to the database in use."""
    url = runtime.database_url(settings)
    applied = migrate_all(url)
    emit(
        {"applied": applied, "database_url": url},
        as_json=args.json,
        text=lambda d: "\n".join(f"applied {name}" for name in d["applied"])
        or "database is up to date",
    )
    return ExitCode.OK


def run_drop_snapshots(args: argparse.Namespace, settings: Settings) -> int:
    """Delete every snapshot of saga state: after a rebuild, or to rule them out (a write:
    on the primary, never the read side)."""
    with runtime.primary_side(settings) as ctx:
        dropped = PostgresSnapshots(ctx.store).drop_snapshots()
    emit({"dropped": dropped}, as_json=args.json,
         text=lambda d: f"dropped {d['dropped']} snapshots of saga state")
    return ExitCode.OK


MASK = "***"
"""What a masked password reads as."""

_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def mask_password(url: str) -> str:
    """``url`` with its password replaced by ``***``: in the URL's user part, in a
    ``password=`` query parameter, or in a libpq ``key=value`` connection string."""
    if "://" not in url:
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:{MASK}@{hostinfo}"
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key == "password" for key, _ in pairs):
        query = urlencode([(k, MASK if k == "password" else v) for k, v in pairs], safe="/*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def run_url(args: argparse.Namespace, settings: Settings) -> int:
    """Print the database URL in use (its password masked unless --show-password), starting
    the embedded server if that is the one."""
    url = runtime.database_url(settings)
    if not args.show_password:
        url = mask_password(url)
    emit(
        {"database_url": url, "embedded": settings.embedded_database},
        as_json=args.json,
        text=lambda d: d["database_url"],
    )
    return ExitCode.OK


def run_start(args: argparse.Namespace, settings: Settings) -> int:
    """Start (or find running) the embedded servers the settings use: read commands never
    start one, so after a demo that stopped them this is how to read its sagas."""
    before = embedded_state.state(settings.home)
    ends = runtime.endpoints(settings, need_broker=True)
    started = {}
    if ends.embedded_database:
        started["postgres"] = "already running" if before.postgres else "started"
    if ends.embedded_broker:
        started["redis"] = "already running" if before.redis else "started"
    emit(
        {"servers": started, "home": str(settings.home.resolve())},
        as_json=args.json,
        text=lambda d: "\n".join(f"{name}: {what}" for name, what in d["servers"].items())
        or "nothing to start: SAGAFLEET_DATABASE_URL and SAGAFLEET_BROKER_URL are both set",
    )
    return ExitCode.OK


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """Say which embedded servers under SAGAFLEET_HOME run, starting nothing."""
    now = embedded_state.state(settings.home)
    emit(
        {"running": {"postgres": now.postgres, "redis": now.redis},
         "home": str(settings.home.resolve())},
        as_json=args.json,
        text=lambda d: "\n".join(f"{name}: {'running' if up else 'not running'}"
                                 for name, up in d["running"].items()),
    )
    return ExitCode.OK


def run_stop(args: argparse.Namespace, settings: Settings) -> int:
    """Stop the embedded servers under SAGAFLEET_HOME, if they run."""
    stopped = embedded.stop_embedded(settings.home)
    emit(
        {"stopped": stopped, "home": str(settings.home.resolve())},
        as_json=args.json,
        text=lambda d: "\n".join(
            f"{name}: {'stopped' if was else 'was not running'}"
            for name, was in d["stopped"].items()
        ),
    )
    return ExitCode.OK

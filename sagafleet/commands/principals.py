"""``sagafleet principals add|list|revoke|rotate`` and ``principals keys add|revoke``.

The principal directory (:mod:`application.principals.directory`) is administered like the schema:
with
the database, not with a token. Whoever can reach the database URL (``SAGAFLEET_DATABASE_URL``
or the embedded server under ``SAGAFLEET_HOME``) already holds every secret of the fleet, so
these commands take no token; that is also how the first principals come to exist (an admin
runs ``sagafleet principals add`` right after ``sagafleet db migrate``). Everything else acts
with a token these commands issue.

A token is printed once, when it is issued (``add``, ``rotate``), or written to a new file of
mode 0600 with ``--save-token PATH`` and then not printed at all; the directory keeps only its
digest. A generated signing key's private half is shown (or saved) once, the same way.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from application.principals.directory import Issued, PrincipalRecord
from application.principals.postgres import PostgresPrincipals
from saga_core.access.roles import ROLE_ACTIONS, PrincipalKind
from sagafleet import runtime
from sagafleet.errors import InvalidInput, NotFound
from sagafleet.exit_codes import ExitCode
from sagafleet.output import emit
from sagafleet.settings import Settings

PUBLIC_KEY_BYTES = 4096
"""Longest public key file read (a PEM Ed25519 key is 113 bytes)."""

EXAMPLES = f"""examples:
  sagafleet principals add ada --kind person --role approver --tenant acme --save-token ada.token
  sagafleet principals add booking-bot --kind agent --role agent --tenant acme --json
  sagafleet principals list --tenant acme
  sagafleet principals rotate ada --tenant acme --save-token ada.token
  sagafleet principals revoke ada --tenant acme --reason "left the team"
  sagafleet principals keys add booking-bot --tenant acme --save-private-key bot.pem
  sagafleet principals keys revoke sk_…
  sagafleet principals add pat --kind person --role fleet_operator --tenant fleet

built-in roles: {", ".join(f"{role} ({', '.join(sorted(actions))})"
                            for role, actions in ROLE_ACTIONS.items())}; any other role name
(payments_approver) is free for a risk gate to name. fleet_operator is the platform's role,
not a tenant's: besides its own tenant's dead letters it alone sees and resolves the dead
letters no tenant is proven to own (unsigned, forged, malformed messages), the workers page and
the metrics endpoints; it never sees another tenant's sagas or letters (give it a tenant of its
own, e.g. `fleet`). The commands take the database (like `db migrate`), not a token: whoever
reaches the database administers its principals.
"""


def register(sub: Any) -> None:
    """Add ``principals`` and its actions."""
    fmt = argparse.RawDescriptionHelpFormatter
    top = sub.add_parser("principals", help="people and agents of a tenant: tokens, roles, keys",
                         epilog=EXAMPLES, formatter_class=fmt)
    actions = top.add_subparsers(dest="principals_command", required=True, metavar="ACTION")

    def action(name: str, helptext: str, parent: Any = actions) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(
            name, help=helptext, epilog=EXAMPLES, formatter_class=fmt)
        parser.add_argument("--tenant", default=None,
                            help="the principal's tenant (SAGAFLEET_TENANT)")
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        return parser

    add = action("add", "add a principal and print its API token (shown once)")
    add.add_argument("name", help="what events record as the actor, e.g. ada")
    add.add_argument("--kind", required=True, choices=[k.value for k in PrincipalKind],
                     help="a person (may approve, with a gate's role) or an agent (never)")
    add.add_argument("--role", dest="roles", action="append", required=True, metavar="ROLE",
                     help="a role (repeat for more)")
    _save_token_option(add)
    add.set_defaults(handler=run_add)

    listing = action("list", "the tenant's principals (never a token)")
    listing.set_defaults(handler=run_list)

    revoke = action("revoke", "revoke a principal: its token and signing keys stop working")
    revoke.add_argument("name")
    revoke.add_argument("--reason", required=True, help="why (kept with the principal)")
    revoke.set_defaults(handler=run_revoke)

    rotate = action("rotate", "issue a new token; the old one stops working at once")
    rotate.add_argument("name")
    _save_token_option(rotate)
    rotate.set_defaults(handler=run_rotate)

    keys = actions.add_parser("keys", help="Ed25519 signing keys for signed Celery commands",
                              epilog=EXAMPLES, formatter_class=fmt)
    key_actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    key_add = action("add", "record a public key, or generate a pair (private key shown once)",
                     key_actions)
    key_add.add_argument("name", help="the principal the key signs for")
    key_add.add_argument("--public-key", default=None, metavar="FILE",
                         help="an Ed25519 public key (PEM or 32 raw bytes); else a pair is made")
    key_add.add_argument("--save-private-key", default=None, metavar="PATH",
                         help="write a generated private key to this new file (mode 0600) "
                              "instead of printing it")
    key_add.set_defaults(handler=run_key_add)
    key_revoke = keys_revoke_parser(key_actions, fmt)
    key_revoke.set_defaults(handler=run_key_revoke)


def keys_revoke_parser(parent: Any, fmt: type[argparse.HelpFormatter]) -> argparse.ArgumentParser:
    """``principals keys revoke KID`` (a key id names its principal and tenant already)."""
    parser: argparse.ArgumentParser = parent.add_parser(
        "revoke", help="revoke one signing key", epilog=EXAMPLES, formatter_class=fmt)
    parser.add_argument("kid", help="the key id, sk_…")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    return parser


def _save_token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--save-token", default=None, metavar="PATH",
                        help="write the token to this new file (mode 0600) instead of "
                             "printing it; use it with --token-file")


@contextmanager
def _directory(settings: Settings) -> Iterator[PostgresPrincipals]:
    """The directory of the (already migrated) database in use: the primary, as principals
    commands write (and a just-issued token must be seen at once)."""
    with runtime.primary_side(settings) as ctx:
        yield PostgresPrincipals(ctx.store)


@contextmanager
def _secret_file(path: str | None) -> Iterator[IO[str] | None]:
    """A new file only its owner can read, opened before anything is issued (so a bad path
    issues nothing) and removed again if issuing fails; None without a path."""
    if path is None:
        yield None
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInput(f"{path} exists already; give a new file (nothing was issued)")\
            from None
    except OSError as exc:
        raise NotFound(f"cannot create {path}: {exc.strerror} (nothing was issued)") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
    except BaseException:
        Path(path).unlink(missing_ok=True)  # nothing was issued into it: leave no empty file
        raise


def _record_json(record: PrincipalRecord) -> dict[str, Any]:
    return {"tenant": record.tenant, "name": record.name, "kind": record.kind.value,
            "roles": sorted(record.roles), "created_at": record.created_at.isoformat(),
            "token_issued_at": None if record.token_issued_at is None
            else record.token_issued_at.isoformat(),
            "revoked": record.revoked,
            "revoked_at": None if record.revoked_at is None else record.revoked_at.isoformat(),
            "revoked_reason": record.revoked_reason, "signing_keys": list(record.signing_keys)}


def _show_issued(issued: Issued, what: str, saved: IO[str] | None, path: str | None,
                 as_json: bool) -> None:
    """Print the principal and its token once, or where the token was saved."""
    principal = issued.principal
    document: dict[str, Any] = {
        "tenant": principal.tenant, "name": principal.name, "kind": principal.kind.value,
        "roles": sorted(principal.roles)}
    if saved is not None:
        saved.write(issued.token + "\n")
        document["token_file"] = path
    else:
        document["token"] = issued.token
    head = (f"{what} {principal.kind} {principal.name!r} of tenant {principal.tenant!r} "
            f"(roles: {', '.join(sorted(principal.roles))})")
    emit(document, as_json=as_json, text=lambda d: head + "\n" + (
        f"token written to {d['token_file']} (mode 0600); use it with --token-file"
        if "token_file" in d else
        f"token (shown once; store it now): {d['token']}"))


def run_add(args: argparse.Namespace, settings: Settings) -> int:
    """Add a principal; print (or save) its token once."""
    tenant = args.tenant or settings.tenant
    with _directory(settings) as directory, _secret_file(args.save_token) as saved:
        issued = directory.add(tenant, args.name, args.kind, args.roles)
        _show_issued(issued, "added", saved, args.save_token, args.json)
    return ExitCode.OK


def run_rotate(args: argparse.Namespace, settings: Settings) -> int:
    """Issue a principal a new token; print (or save) it once."""
    tenant = args.tenant or settings.tenant
    with _directory(settings) as directory, _secret_file(args.save_token) as saved:
        issued = directory.rotate(tenant, args.name)
        _show_issued(issued, "new token for", saved, args.save_token, args.json)
    return ExitCode.OK


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    """List the tenant's principals."""
    tenant = args.tenant or settings.tenant
    with _directory(settings) as directory:
        records = directory.list(tenant)
    emit({"tenant": tenant, "principals": [_record_json(r) for r in records]},
         as_json=args.json, text=lambda d: "\n".join(
             f"{p['name']:<24} {p['kind']:<7} {','.join(p['roles']):<28} "
             + (f"revoked {p['revoked_at']}: {p['revoked_reason']}" if p["revoked"]
                else f"token issued {p['token_issued_at']}")
             + (f"  keys: {' '.join(p['signing_keys'])}" if p["signing_keys"] else "")
             for p in d["principals"]) or f"tenant {tenant!r} has no principals")
    return ExitCode.OK


def run_revoke(args: argparse.Namespace, settings: Settings) -> int:
    """Revoke a principal, its token and its signing keys."""
    tenant = args.tenant or settings.tenant
    with _directory(settings) as directory:
        record = directory.revoke(tenant, args.name, args.reason)
    emit(_record_json(record), as_json=args.json, text=lambda d: (
        f"revoked {d['kind']} {d['name']!r} of tenant {d['tenant']!r} at {d['revoked_at']}: "
        f"{d['revoked_reason']}"))
    return ExitCode.OK


def run_key_add(args: argparse.Namespace, settings: Settings) -> int:
    """Record or generate a signing key; a generated private key is shown (or saved) once."""
    tenant = args.tenant or settings.tenant
    public = _read_public_key(args.public_key) if args.public_key else None
    saving = args.save_private_key if public is None else None
    with _directory(settings) as directory, _secret_file(saving) as saved:
        issued = directory.add_signing_key(tenant, args.name, public)
        document: dict[str, Any] = {"kid": issued.kid, "tenant": tenant, "name": args.name}
        if issued.private_key_pem is not None and saved is not None:
            saved.write(issued.private_key_pem.decode("ascii"))
            document["private_key_file"] = saving
        elif issued.private_key_pem is not None:
            document["private_key_pem"] = issued.private_key_pem.decode("ascii")
    emit(document, as_json=args.json, text=lambda d: (
        f"signing key {d['kid']} for {d['name']!r} of tenant {d['tenant']!r}"
        + (f"\nprivate key written to {d['private_key_file']} (mode 0600)"
           if "private_key_file" in d else "")
        + (f"\nprivate key (shown once; store it now):\n{d['private_key_pem']}"
           if "private_key_pem" in d else "")))
    return ExitCode.OK


def run_key_revoke(args: argparse.Namespace, settings: Settings) -> int:
    """Revoke one signing key."""
    with _directory(settings) as directory:
        directory.revoke_signing_key(args.kid)
    emit({"kid": args.kid, "revoked": True}, as_json=args.json,
         text=lambda d: f"signing key {d['kid']} revoked")
    return ExitCode.OK


def _read_public_key(path: str) -> bytes:
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(PUBLIC_KEY_BYTES + 1)
    except OSError as exc:
        raise NotFound(f"--public-key: cannot read {path}: {exc.strerror}") from None
    if len(data) > PUBLIC_KEY_BYTES:
        raise InvalidInput(f"--public-key: {path} is larger than a public key")
    return data

"""``sagafleet dev``: a whole local fleet in one command, the way a workflow engine's dev
server works.

It resolves the database and broker (the embedded servers under ``SAGAFLEET_HOME`` unless
URLs are configured), migrates, registers what the fleet runs, adds two principals, and starts
a worker, the sweeper, the projector and the operator console as child processes; it prints
what runs where and a token to sign in with, then waits. Ctrl-C (or SIGTERM) stops every
process it started, and the embedded servers if it started them; a child that dies on its
own stops the rest too, and the command fails naming it and its log.

What it runs: the user's tool set (``--tools package.module:attribute``) and definition files
(``--definitions PATH ...``, registered in the shared set every tenant sees), or, with
neither, the example trip on the sandbox providers. What can be checked without a database
is checked before anything starts (the tool set's module and attribute, each file's shape);
the tool set is built, and each definition validated against its catalogue, once the
database is up and before any child starts. Either way a bad tool set or definition file is
a :class:`DevSetupError` naming it, and nothing is left running.

Who acts: ``dev-agent`` (roles agent and admin: starts sagas, registers definitions) and
``dev-operator`` (a person with the approver and operator roles: signs in to the console,
approves, resolves). Four eyes hold here too: the agent starts, the person approves. Both
tokens are written to files of mode 0600 under ``SAGAFLEET_HOME`` (issued anew at each start);
the person's is printed, to paste into the console's sign-in page.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from application.principals.directory import PrincipalConflict, PrincipalDirectory
from saga_core.access.roles import (
    ADMIN_ROLE,
    AGENT_ROLE,
    APPROVER_ROLE,
    OPERATOR_ROLE,
    PrincipalKind,
)
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.definition import parse_definition
from saga_core.definitions.validation import validate_definition
from saga_core.errors import ErrorKind, SagaError
from sagafleet import embedded_leases, runtime, sandbox
from sagafleet.commands.sagas import read_definition_file
from sagafleet.example_sagas import trip_tool_catalogue
from sagafleet.example_sagas.registration import register_trip
from sagafleet.migrate import migrate_all
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.settings import Settings
from workers.fleet import Fleet, FleetConfig
from workers.tools import ToolSetError, load_tool_set, tool_set_target

TENANT = "default"
AGENT = "dev-agent"
OPERATOR = "dev-operator"
AGENT_ROLES = frozenset({AGENT_ROLE, ADMIN_ROLE})
OPERATOR_ROLES = frozenset({APPROVER_ROLE, OPERATOR_ROLE})
READY_WAIT_S = 120.0
"""How long the console may take to answer before the start counts as failed."""


class DevSetupError(SagaError):
    """What ``sagafleet dev`` was asked to run cannot run: the message names the tool set,
    the definition file or the child process, and why."""

    kind = ErrorKind.MISCONFIGURED


@dataclass(frozen=True)
class DevOptions:
    """What to run: a tool set reference (``None``: the sandbox's trip tools), definition
    files, and the console's port on 127.0.0.1."""

    tools: str | None = None
    definitions: tuple[Path, ...] = ()
    port: int = 8080


@dataclass
class DevFleet:
    """The processes ``sagafleet dev`` started, and where each writes its log."""

    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def start(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        """Start ``sagafleet ARGS`` as ``name``."""
        self.logs[name] = log_dir / f"{name}.log"
        self.procs[name] = spawn_sagafleet(args, env, self.logs[name])

    def ended(self) -> str | None:
        """The name of a child that is no longer running, if any."""
        return next((name for name, proc in self.procs.items() if proc.poll() is not None),
                    None)

    def stop(self) -> None:
        """Warm shutdown of every child (SIGTERM; SIGKILL after a grace period)."""
        stop_processes(self.procs.values())


def check_tools_reference(reference: str) -> None:
    """Before anything starts: ``reference`` looks like ``package.module:attribute``, the
    module imports and has the attribute; :class:`DevSetupError` naming it otherwise. (The
    tool set itself is built later, once the database it may need exists.)"""
    try:
        tool_set_target(reference)
    except ToolSetError as exc:
        raise DevSetupError(f"sagafleet dev --tools {reference}: {exc}") from None


def check_tools(reference: str) -> ToolCatalogue:
    """The catalogue of the tool set ``reference`` names, after checking that it builds and
    that its catalogue and implementations agree (what a worker will check at its start);
    :class:`DevSetupError` naming it otherwise. Built with the environment the worker will
    have (the database URL set), since a tool set may connect to its providers."""
    try:
        tools = load_tool_set(reference)
    except Exception as exc:  # the user's own factory may raise anything: name it, once
        raise DevSetupError(f"sagafleet dev --tools {reference}: {exc}") from None
    try:
        tools.check()
        return tools.catalogue
    except SagaError as exc:
        raise DevSetupError(f"sagafleet dev --tools {reference}: {exc}") from None
    finally:
        tools.close()


def read_definitions(paths: Sequence[Path]) -> list[dict[str, object]]:
    """Every definition file's document (shape checked); :class:`DevSetupError` naming the
    first file that cannot be one."""
    documents = []
    for path in paths:
        try:
            documents.append(read_definition_file(path))
        except SagaError as exc:
            raise DevSetupError(f"sagafleet dev --definitions: {exc}") from None
    return documents


def issue_token(directory: PrincipalDirectory, name: str, kind: PrincipalKind,
                roles: frozenset[str], home: Path) -> tuple[str, Path]:
    """Add ``name`` (or, from an earlier run, issue it a new token) and save the token in a
    new file of mode 0600 under ``home``; return the token and the file."""
    try:
        issued = directory.add(TENANT, name, kind, roles)
    except PrincipalConflict:
        issued = directory.rotate(TENANT, name)
    path = home / f"{name}.token"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(issued.token + "\n")
    return issued.token, path


def console_answers(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the dev fleet as Ctrl-C does (a process manager's stop)."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(settings: Settings, options: DevOptions, out: TextIO = sys.stdout) -> None:
    """Bring the local fleet up, wait until interrupted, stop everything it started. Returns
    never: a child that died on its own is a :class:`DevSetupError`; Ctrl-C propagates after
    the clean stop (exit 130)."""
    # Everything that can be refused is refused before anything starts.
    if options.tools is not None:
        check_tools_reference(options.tools)
    documents = read_definitions(options.definitions)
    if console_answers(options.port):
        raise DevSetupError(f"sagafleet dev --port {options.port}: something already listens "
                            "on 127.0.0.1 there; choose another port")
    children = DevFleet()
    # A lease on the embedded servers: a demo or another dev on this home keeps them up
    # until the last one leaves; servers that ran before any lease stay running.
    try:
        with embedded_leases.lease(settings.home, postgres=settings.embedded_database,
                                   redis=settings.embedded_broker), _sigterm_as_interrupt():
            try:
                _bring_up(settings, options, documents=documents, children=children,
                          out=out)
                while (gone := children.ended()) is None:
                    time.sleep(0.5)
                code = children.procs[gone].returncode
                raise DevSetupError(f"sagafleet dev: the {gone} stopped on its own (exit "
                                    f"{code}); see {children.logs[gone]}")
            finally:
                children.stop()
    finally:
        print("sagafleet dev: stopped", file=out, flush=True)


def _bring_up(settings: Settings, options: DevOptions, *,
              documents: list[dict[str, object]], children: DevFleet, out: TextIO) -> None:
    """Servers, schema, definitions and principals; then the four children, announced once
    the console answers."""
    ends = runtime.endpoints(settings, need_broker=True)
    assert ends.broker_url is not None  # need_broker=True
    migrate_all(ends.database_url)
    reference = options.tools or sandbox.TOOL_SET
    env = child_env(ends.database_url, ends.broker_url, reference)
    if options.tools is None:
        sandbox.install(ends.database_url)  # the example's providers' ledgers
        catalogue = trip_tool_catalogue()
    else:
        # Built as the worker will build it: with the resolved URLs in the environment (a
        # tool set may open its providers' database from SAGAFLEET_DATABASE_URL).
        os.environ.update(env)
        catalogue = check_tools(options.tools)
    # This process only registers and issues tokens: the catalogue is all it needs.
    fleet = Fleet(FleetConfig(database_url=ends.database_url,
                              broker_url=ends.broker_url), catalogue)
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        _, agent_file = issue_token(
            fleet.principals, AGENT, PrincipalKind.AGENT, AGENT_ROLES, settings.home)
        token, operator_file = issue_token(
            fleet.principals, OPERATOR, PrincipalKind.PERSON, OPERATOR_ROLES,
            settings.home)
        registered = _register(fleet, documents, options)
    finally:
        fleet.close()
    log_dir = settings.home / "dev-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    children.start("worker", ["worker"], env, log_dir)
    children.start("sweeper", ["sweeper"], env, log_dir)
    children.start("projector", ["projector"], env, log_dir)
    children.start("console", ["console", "--http", f"127.0.0.1:{options.port}",
                               "--no-projector"], env, log_dir)
    _wait_for_console(children, options.port)
    _announce(out, settings=settings, options=options, reference=reference,
              registered=registered, children=children, token=token,
              agent_file=agent_file, operator_file=operator_file)


def _register(fleet: Fleet, documents: list[dict[str, object]],
              options: DevOptions) -> list[str]:
    """Register the user's definition files or, with no tool set and no definitions, the
    example trip; return what was registered.

    Both go to the shared set every tenant sees: a local fleet's principals may be of any
    tenant (the tutorial's are ``acme``'s), and whoever runs ``sagafleet dev --definitions``
    is the operator registering them. A file whose content changed without a version bump
    is refused by name (a registered name and version never changes its content)."""
    if not options.definitions:
        if options.tools is None:
            register_trip(fleet)
            return ["trip (the example, on the sandbox providers)"]
        return []
    names = []
    for path, document in zip(options.definitions, documents, strict=True):
        try:
            definition = validate_definition(parse_definition(document), fleet.catalogue)
            fleet.definitions.register_shared(definition, registered_by="sagafleet dev")
        except SagaError as exc:
            raise DevSetupError(f"sagafleet dev --definitions {path}: {exc}") from None
        names.append(f"{definition.name} v{definition.version} ({path})")
    return names


def child_env(database_url: str, broker_url: str, tools: str) -> dict[str, str]:
    """The children's environment: the resolved endpoints (so that a tool set reading the
    settings finds the database the embedded default gave) and the tool set."""
    return {**os.environ, "SAGAFLEET_DATABASE_URL": database_url,
            "SAGAFLEET_BROKER_URL": broker_url, "SAGAFLEET_TOOLS": tools}


def _wait_for_console(children: DevFleet, port: int) -> None:
    """Wait until the console answers (it has migrated and listens); a child that ends
    meanwhile is a :class:`DevSetupError` naming its log."""
    deadline = time.monotonic() + READY_WAIT_S
    while not console_answers(port):
        gone = children.ended()
        if gone is not None:
            raise DevSetupError(f"sagafleet dev: the {gone} stopped while starting (exit "
                                f"{children.procs[gone].returncode}); see {children.logs[gone]}")
        if time.monotonic() > deadline:
            raise DevSetupError(f"sagafleet dev: the console did not answer on port {port} "
                                f"within {READY_WAIT_S:.0f} s; see {children.logs['console']}")
        time.sleep(0.2)


def _announce(out: TextIO, *, settings: Settings, options: DevOptions, reference: str,
              registered: list[str], children: DevFleet, token: str, agent_file: Path,
              operator_file: Path) -> None:
    """What runs, where, and how to use it."""
    home = settings.home.resolve()
    lines = [
        f"sagafleet dev: a local fleet under {home}",
        f"  tools:       {reference}",
        *(f"  definition:  {name}" for name in registered),
        *(f"  {name + ':':<12} pid {proc.pid}, log {children.logs[name]}"
          for name, proc in children.procs.items()),
        f"  open:        http://127.0.0.1:{options.port}/",
        f"  sign in as {OPERATOR} (approver, operator) with this token:",
        f"    {token}",
        f"    (also in {operator_file})",
        f"  start sagas as {AGENT} (agent, admin), in another shell:",
        f"    SAGAFLEET_HOME={home} SAGAFLEET_TOKEN_FILE={agent_file} sagafleet start "
        f"{'trip' if options.tools is None else 'DEFINITION'} --input @input.json",
        "Ctrl-C stops everything.",
    ]
    print("\n".join(lines), file=out, flush=True)

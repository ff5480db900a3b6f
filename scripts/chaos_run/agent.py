"""The chaos run's agent: sends ``sagafleet.commands.*`` through Celery exactly as an
external agent does (a bare Celery client, the task's name, JSON keyword arguments signed
with its principal's key by ``sagafleet.agent.CommandSigner``), throughout the run and
through every server outage.

A command is signed when it is first published (so it is fresh whenever it is due), with
its Celery task id as its ``command_id``. The agent retries a publish the broker refused,
as an agent would, with the same task id and the same signed arguments (never signed
again: that would be a new command; every command is idempotent: start by key, cancel by
state, plan by hash), and
records which publish returned: a command is *accepted* once ``send_task`` returned.
What became of each accepted command is judged at the end (:mod:`chaos_run.verdicts`).

A broker that restarts without persistence loses what it held, accepted commands included.
The agent follows the README's protocol for that: it watches the broker's ``run_id``
(``INFO server``, new on every restart), and once it has seen a restart it resends every
accepted command not yet seen acting -- as ``sagafleet find KEY`` would tell it, for all of
them in one look at the log (``acted``) -- signed again under a new command id (a resend is
a new message; every command is idempotent: a start by its key -- this agent's starts all
have one --, a plan by its name, a cancel by the saga's state). Resends are recorded on the
command they repeat and counted in the report. Without ``acted`` (``--no-resend``) the
agent does not resend, to measure what a restart drops.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu.exceptions import KombuError, OperationalError
from redis import RedisError

from sagafleet.agent import CommandSigner
from sagafleet.demo import DEMO_DEFINITION, trip_input
from workers.celery_app import QUEUE_COMMANDS, broker_redis
from workers.tasks import CANCEL_SAGA, START_SAGA, SUBMIT_PLAN

AGENT_TENANT = "acme"
AGENT_ACTOR = "chaos-agent"
PUBLISH_GIVE_UP_S = 60.0
"""How long the agent keeps retrying one publish before it gives the command up."""


@dataclass
class Command:
    """One agent command: what was sent, when, what the broker said, and what was down."""

    command_id: str  # the Celery task id and the signed command id, the same on every retry
    task: str
    args: dict[str, Any]  # what the envelope carries
    target: str  # start: the idempotency key; cancel: the saga id; plan: the definition name
    due_s: float
    tenant: str = AGENT_TENANT  # whose agent signs it
    kwargs: dict[str, Any] | None = None  # the signed message, once first published
    first_try_s: float | None = None
    accepted_s: float | None = None
    accepted_at: datetime | None = None  # wall clock, to compare with the log's times
    attempts: int = 0
    refused: list[str] = field(default_factory=list)  # the broker's errors, in order
    servers_down: tuple[str, ...] = ()  # servers down while this command was being sent
    resends: list[str] = field(default_factory=list)  # task ids of its resends, in order
    resent_at_s: list[float] = field(default_factory=list)  # when each resend was accepted

    @property
    def message_ids(self) -> tuple[str, ...]:
        """The Celery task ids of every message that carried it (first send and resends)."""
        return (self.command_id, *self.resends)

    @property
    def kind(self) -> str:
        """start, cancel or plan."""
        return {START_SAGA: "start", CANCEL_SAGA: "cancel", SUBMIT_PLAN: "plan"}[self.task]


class CancelDesk:
    """Where the agent asks for a saga to cancel and the operator hands one over.

    A cancel target is a saga waiting for approval that the operator then holds (leaves
    unanswered) until the cancel shows in the log: so a cancel that was not acted on can
    only be lost, never "too late because the saga finished meanwhile".
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wanted = 0
        self.unserved = 0  # cancels wanted that no saga waiting for approval served
        self._offered: deque[tuple[str, str]] = deque()
        self.held: dict[str, str] = {}  # saga id -> tenant, while its cancel is pending

    def want(self) -> None:
        """The agent would like one more saga to cancel."""
        with self._lock:
            self._wanted += 1

    def offer(self, saga_id: str, tenant: str) -> bool:
        """The operator offers a saga waiting for approval; True if taken (then held)."""
        with self._lock:
            if self._wanted == 0 or saga_id in self.held:
                return False
            self._wanted -= 1
            self.held[saga_id] = tenant
            self._offered.append((saga_id, tenant))
            return True

    def take(self) -> tuple[str, str] | None:
        """The next saga handed over to the agent, if any."""
        with self._lock:
            return self._offered.popleft() if self._offered else None

    def is_held(self, saga_id: str) -> bool:
        """Whether the operator must leave this saga's approval unanswered."""
        with self._lock:
            return saga_id in self.held

    def stop_wanting(self) -> None:
        """The agent stops sending: wants not served by now never will be."""
        with self._lock:
            self.unserved += self._wanted
            self._wanted = 0

    def release(self, saga_ids: set[str] | None = None) -> None:
        """Stop holding these sagas (all, when None): their cancel is in the log, or over."""
        with self._lock:
            for saga_id in list(self.held) if saga_ids is None else saga_ids:
                self.held.pop(saga_id, None)


@dataclass(frozen=True)
class AgentPlan:
    """How many commands of each kind, sent over which part of the run."""

    starts: int
    cancels: int
    plans: int
    window_s: float
    seed: int


def plan_body(index: int) -> dict[str, Any]:
    """A small agent plan over the trip tools: hold a flight, then a hotel."""
    email = f"planner{index}@example.com"
    return {"goal": f"chaos plan {index}", "actions": [
        {"tool": "flights.hold", "args": {"flight_id": f"FL{300 + index}",
                                          "passenger_email": email}},
        {"tool": "hotels.hold", "args": {"hotel_id": f"HT{400 + index}", "nights": 1,
                                         "guest_email": email}},
    ]}


def agent_commands(plan: AgentPlan, deposit: Callable[[Any], dict[str, str]]) -> list[Command]:
    """Every start and plan command with its due time, spread evenly (with a seeded jitter)
    over the window; cancels are added when the operator hands a saga over.

    A start's secret card token never crosses the broker (the fleet refuses a raw one): the
    agent deposits it first with ``deposit`` (a direct call, before the run's faults) and
    sends the ref it returns."""
    rng = random.Random(f"agent-{plan.seed}")
    commands = []
    for i in range(plan.starts):
        key = f"agent-{plan.seed}-{i}"
        data = trip_input(10_000 + i, plan.seed)
        data["card_token"] = deposit(data["card_token"])
        commands.append(Command(str(uuid.uuid4()), START_SAGA, {
            "definition": DEMO_DEFINITION, "input": data,
            "key": key, "reason": "chaos agent start"}, key, 0.0))
    for i in range(plan.plans):
        name = f"chaos_plan_{plan.seed}_{i}"
        commands.append(Command(str(uuid.uuid4()), SUBMIT_PLAN, {
            "plan": plan_body(i), "name": name}, name, 0.0))
    rng.shuffle(commands)
    for i, command in enumerate(commands):
        spot = (i + rng.random()) / max(len(commands), 1)
        command.due_s = round(plan.window_s * spot, 2)
    commands.sort(key=lambda c: c.due_s)
    return commands


class AgentSender(threading.Thread):
    """Sends the agent's commands on schedule from its own thread and its own Celery client."""

    def __init__(self, broker_url: str, plan: AgentPlan, desk: CancelDesk,
                 clock: Callable[[], float], down: Callable[[], tuple[str, ...]],
                 deposit: Callable[[Any], dict[str, str]],
                 signers: Mapping[str, CommandSigner],
                 acted: Callable[[list[Command]], set[str]] | None = None,
                 sentinel_master: str | None = None) -> None:
        """``signers``: the agent principal's signer in each tenant it acts for (its own
        sagas' tenant, and every tenant whose sagas the operator may hand over to cancel).
        ``acted``: the ids of the given commands whose effect is in the log (raises while
        the database is down); None: never resend after a broker restart.
        ``sentinel_master``: with a ``sentinel://`` broker URL, the master's name (the
        agent's Celery client gets it as kombu's ``master_name`` transport option)."""
        super().__init__(name="chaos-agent", daemon=True)
        self.signers = signers
        self.broker_url = broker_url
        self.sentinel_master = sentinel_master
        self.acted = acted
        self.broker_run_id: str | None = None
        self.restarts_seen = 0
        self.resend_due = False  # a restart was seen; the resends it calls for are not done
        self.last_look = 0.0
        self.app = Celery("chaos-agent", broker=broker_url, set_as_current=False)
        self.app.conf.update(task_serializer="json", accept_content=["json"])
        if sentinel_master is not None:
            self.app.conf.broker_transport_options = {"master_name": sentinel_master}
        self.plan = plan
        self.desk = desk
        self.clock = clock  # seconds since the run started
        self.down = down  # the servers down right now (a callable)
        self.pending = agent_commands(plan, deposit)
        self.sent: list[Command] = []
        self.cancels_due = [round(plan.window_s * (i + 0.5) / max(plan.cancels, 1), 2)
                            for i in range(plan.cancels)]
        self.unserved_cancels = 0
        self.nudge = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        """Send what is due; on a nudge (a server just went down) send the next one now."""
        try:
            while not self.stopping.is_set():
                now = self.clock()
                while self.cancels_due and self.cancels_due[0] <= now:
                    self.cancels_due.pop(0)
                    self.desk.want()
                while (target := self.desk.take()) is not None:
                    self.publish(self.cancel_of(*target))
                nudged = self.nudge.is_set()
                self.nudge.clear()
                while self.pending and (self.pending[0].due_s <= now or nudged):
                    self.publish(self.pending.pop(0))
                    nudged = False
                if time.monotonic() - self.last_look >= 1.0:
                    self.resend_after_broker_restart()
                self.nudge.wait(0.1)
            # What fell due while the agent was busy (a publish or a resend through an
            # outage) is still sent; only what was not yet due is "never sent".
            while self.pending and self.pending[0].due_s <= self.clock():
                self.publish(self.pending.pop(0))
            self.desk.stop_wanting()
            self.unserved_cancels = len(self.cancels_due)
            while (target := self.desk.take()) is not None:
                self.publish(self.cancel_of(*target))
            give_up = time.monotonic() + PUBLISH_GIVE_UP_S
            self.resend_after_broker_restart()
            while self.resend_due and time.monotonic() < give_up:
                time.sleep(1.0)
                self.resend_after_broker_restart()
        finally:
            self.app.close()

    def resend_after_broker_restart(self) -> None:
        """Look at the broker's run id; after a restart, resend every accepted command not
        yet seen acting (the README's protocol for a broker that lost its memory)."""
        self.last_look = time.monotonic()
        if self.acted is None:
            return
        try:
            client = broker_redis(self.broker_url, self.sentinel_master)
            try:
                run_id = str(client.info("server")["run_id"])
            finally:
                client.close()
        except (RedisError, OSError):
            return  # down: look again once it is back
        if self.broker_run_id is not None and run_id != self.broker_run_id:
            self.restarts_seen += 1
            self.resend_due = True
        self.broker_run_id = run_id
        if not self.resend_due:
            return
        accepted = [c for c in self.sent if c.accepted_s is not None]
        try:
            acted = self.acted(accepted)
        except Exception:  # noqa: BLE001 - the database restarting: look again later
            return
        unsent = [c for c in accepted if c.command_id not in acted and not self.resend(c)]
        self.resend_due = bool(unsent)

    def recheck(self) -> None:
        """Look at every accepted command again and resend those not acting, as after a
        broker restart: what the agent does when told of a database failover (with
        asynchronous replication the new primary may lack the last commits)."""
        self.resend_due = True
        self.nudge.set()

    def resend(self, command: Command) -> bool:
        """Send ``command`` again: the same arguments, signed anew under a new id; True
        once the broker accepted it."""
        message_id = str(uuid.uuid4())
        _, kwargs = self.signers[command.tenant].sign(command.task, command.args,
                                                      command_id=message_id)
        if not self._send_until_accepted(command.task, kwargs, message_id, []):
            return False
        command.resends.append(message_id)
        command.resent_at_s.append(self.clock())
        return True

    def cancel_of(self, saga_id: str, tenant: str) -> Command:
        """A cancel command for a saga the operator handed over."""
        return Command(str(uuid.uuid4()), CANCEL_SAGA, {
            "saga_id": saga_id, "reason": "the traveller changed their mind"}, saga_id,
            self.clock(), tenant=tenant)

    def publish(self, command: Command) -> None:
        """Publish until the broker accepts it, as an agent would, or give it up."""
        command.first_try_s = self.clock()
        _, command.kwargs = self.signers[command.tenant].sign(
            command.task, command.args, command_id=command.command_id)
        down = set(self.down())
        if self._send_until_accepted(command.task, command.kwargs, command.command_id,
                                     command.refused, down):
            command.accepted_s = self.clock()
            command.accepted_at = datetime.now(UTC)
        command.attempts = len(command.refused) + (command.accepted_s is not None)
        command.servers_down = tuple(sorted(down))
        self.sent.append(command)

    def _send_until_accepted(self, task: str, kwargs: dict[str, Any], task_id: str,
                             refused: list[str], down: set[str] | None = None) -> bool:
        """Publish until the broker accepts (True) or the agent gives up (False); every
        refusal is appended to ``refused``, every server seen down added to ``down``."""
        give_up = time.monotonic() + PUBLISH_GIVE_UP_S
        delay = 0.2
        while True:
            try:
                self.app.send_task(task, kwargs=kwargs, queue=QUEUE_COMMANDS, task_id=task_id)
                return True
            except (OperationalError, KombuError, RedisError, OSError) as exc:
                refused.append(f"{type(exc).__name__}: {str(exc)[:120]}")
                if down is not None:
                    down |= set(self.down())
                if time.monotonic() > give_up or self.stopping.is_set():
                    return False
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def stop(self) -> None:
        """Stop sending and wait for the thread (commands not yet sent are reported so)."""
        self.stopping.set()
        self.nudge.set()
        self.join(timeout=PUBLISH_GIVE_UP_S + 5)

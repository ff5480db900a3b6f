"""The application layer: what a caller may do — start, approve, deny, resolve, cancel, plan
and replan, read a saga's status — and the principals, secrets and windows that decide whether
they may. Agents, operators, the CLI, the console, the MCP gateway and the workers all act
through it; it sits below ``workers`` and above ``events`` and ``saga_core``.

Where a saga event is written: :mod:`application.orchestrator` (fold, let ``saga_core`` decide,
append once). Who may approve: ``saga_core.approval`` decides, :mod:`application.client`
enforces it for the principal the directory (:mod:`application.principals`) proved.

* :mod:`application.claiming` — Claiming ahead: the steps a worker takes in the same append as
  its own commit.
* :mod:`application.client` — ``SagaClient``: how agents and operators start, watch, approve and
  cancel sagas.
* :mod:`application.command_signatures` — Verifying a signed agent command: the key, the
  signature, the window, single use.
* :mod:`application.gate_windows` — Tenant windows of cumulative gates: the ledger port of
  reservations and its adapters.
* :mod:`application.messages` — The only thing a broker message carries: which step of which
  saga to look at.
* :mod:`application.orchestrator` — Where a saga event is written: fold, let saga_core decide,
  claim, append once.
* :mod:`application.principals` — The principal directory: the people and agents of each tenant,
  their tokens and signing keys; the port with its PostgreSQL and in-memory adapters.
* :mod:`application.publishing` — The publishing port: how the application sends a saga's due
  steps after the commit that scheduled them (the adapters, Celery's and the one-round-trip
  Redis one, are :mod:`workers.publisher`). A publish that fails is logged and counted, never
  retried: the sweeper finds scheduled-but-not-started work in the log and re-enqueues it.
* :mod:`application.secrets` — Where secrets live: the secrets port and its adapters (a vault
  beside the log, never in it), the placeholders and refs a start carries, and the guard that
  looks for secret values wherever the fleet writes or shows something.
* :mod:`application.seen_versions` — Binding a person's action to the saga version they were
  shown.
* :mod:`application.telemetry` — What a process tells about itself: logs that name their saga,
  Prometheus instruments, OpenTelemetry spans and Sentry.
* :mod:`application.views` — What ``status`` shows: a saga folded from its log, as a JSON-
  friendly model.
"""

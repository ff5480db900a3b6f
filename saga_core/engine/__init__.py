"""The saga's state machine: its events, the fold (``evolve``) and the judgement (``decide``),
with the pure rules they use (claims, due times, stops, conditions, escalations,
corrections, resolution, backoff) and the snapshot codec.

* :mod:`saga_core.engine.backoff` — Exponential backoff with full jitter, drawn
  deterministically from the operation key.
* :mod:`saga_core.engine.claims` — Pure checks for the worker fleet: may this attempt be claimed
  now, and what work is due.
* :mod:`saga_core.engine.condition_rules` — The rules of declared conditions: postconditions,
  step timeouts and compensation deadlines.
* :mod:`saga_core.engine.corrections` — Corrections: the pivot's declared repair, offered to a
  person when a later step fails.
* :mod:`saga_core.engine.decide` — The orchestrator's judgement: ``decide(state, now)`` returns
  what must happen next.
* :mod:`saga_core.engine.decision_types` — What the orchestrator decided: each decision maps to
  exactly one event (``to_event``).
* :mod:`saga_core.engine.dry_run` — A dry run: what starting a saga would do, computed by the
  same pure code a real start runs.
* :mod:`saga_core.engine.due` — When a saga next needs the sweeper: the time its due-time index
  holds, and how often an overdue message may be sent again.
* :mod:`saga_core.engine.escalations` — The evidence a person gets when a saga asks for them,
  and the escalation that carries it.
* :mod:`saga_core.engine.events` — The saga's domain events: immutable facts, each with a type
  name and schema version.
* :mod:`saga_core.engine.resolution` — The operator's resolve rule: which typed actions answer a
  paused saga, and what each does.
* :mod:`saga_core.engine.resolved_commands` — Resolving a step's command from state: tool,
  arguments, precondition, key and request hash.
* :mod:`saga_core.engine.state` — Saga state and its fold: ``evolve(state, event) -> state`` is
  pure and never mutates its input.
* :mod:`saga_core.engine.state_codec` — Snapshots of saga state: a
  :class:`~saga_core.engine.state.SagaState` to JSON and back, and the schema fingerprint a
  stored snapshot must carry to be read at all.
* :mod:`saga_core.engine.stops` — Stop conditions: when a saga's time limit or cost budget stops
  its forward work.
"""

"""What consumes the broker: the Celery app and its tasks, the step executor and its parallel
branches, the sweeper that re-enqueues what the log says is due, the atomic-take Redis
transport, the publisher, dead letters, the tool contract workers call, and the fleet object
that composes them for a worker process.

* :mod:`workers.branches` — How a worker runs one step message: the saga's due branches side by
  side, then onwards.
* :mod:`workers.celery_app` — The Celery application of the fleet, configured for safety rather
  than speed.
* :mod:`workers.dead_letters` — Dead letters: broker messages that can never succeed, kept for
  an operator with every secret withheld and the tenant proven when they were kept; and the rule
  that decides.
* :mod:`workers.executor` — Executing one step command: claim by stream version, call the tool,
  record the result.
* :mod:`workers.fleet` — The fleet's composition: one explicit object holding the store, tools,
  broker and roles.
* :mod:`workers.inspection` — Which workers of the fleet are alive, and what they do: Celery's
  remote control, asked once.
* :mod:`workers.publisher` — Publishing step commands after the commit that scheduled them.
* :mod:`workers.reliable_redis` — kombu's Redis transport with a consume whose take and record
  are one atomic step.
* :mod:`workers.sweeper` — The sweeper: finds in the log what is due and not in flight, and re-
  enqueues it.
* :mod:`workers.tasks` — The fleet's Celery tasks and their documented names.
* :mod:`workers.tools` — The tool contract: what a side-effecting tool promises the saga, and
  the allowlist of tools.
"""

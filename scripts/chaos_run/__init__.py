"""The chaos run behind ``python scripts/chaos.py``, split by concern:

* :mod:`chaos_run.run` — the run: servers, fleet, operator, quiescence, the report;
* :mod:`chaos_run.agent` — the agent sending ``sagafleet.commands.*`` through Celery;
* :mod:`chaos_run.faults` — the fleet's processes and the faults struck at them;
* :mod:`chaos_run.broker` — what Redis holds (the commands a restart drops);
* :mod:`chaos_run.observe` — set-based reads of the log (one query per question);
* :mod:`chaos_run.verdicts` — sagas and commands judged at the end;
* :mod:`chaos_run.report` — the human-readable tables.
"""

"""The failover run behind ``python scripts/failover.py``, split by concern:

* :mod:`failover_run.servers` — a PostgreSQL primary and standby, a ledgers' server, and a
  Redis master, replica and three Sentinels, on loopback from the machine's binaries;
* :mod:`failover_run.witness` — which events the primary acknowledged before it died;
* :mod:`failover_run.run` — the run: the fleet, sagas and agent commands, both failovers,
  quiescence, the checks (the operator, agent and verdicts are the chaos run's);
* :mod:`failover_run.report` — the human-readable tables.
"""

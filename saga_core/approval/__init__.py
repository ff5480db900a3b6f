"""When a person must answer: risk gates and the combined approval policy, how recipients and
amounts are read, cumulative totals, and accepting an answer.

* :mod:`saga_core.approval.answers` — Accepting a person's answer to an approval request: who
  may give it, and what it binds.
* :mod:`saga_core.approval.policy` — The approval policy in force for one operation: the
  catalogue's gate plus the definition's.
* :mod:`saga_core.approval.recipients` — Reading an argument as email recipients, the standard
  way, for a recipient gate.
* :mod:`saga_core.approval.risk_gates` — Risk gates as catalogue data: when a call of a tool
  needs a person, and which person.
* :mod:`saga_core.approval.totals` — Cumulative limits: which calls of a gated tool count, and
  what one saga's calls sum to.
"""

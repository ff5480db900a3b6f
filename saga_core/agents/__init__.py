"""What an agent proposes: plans and replans validated against the catalogue, and the lineage
of a request.

* :mod:`saga_core.agents.lineage` — Who and what asked for a saga: the agent's request, the
  model, the prompt and the trace.
* :mod:`saga_core.agents.plans` — Agent plans: a model proposes allowlisted tool calls;
  deterministic code decides if they run.
* :mod:`saga_core.agents.replans` — Replans keep their keys: an agent's revised plan becomes the
  next plan version of the same saga (failure table row 4, "the model replans the same action as
  a new step").
"""

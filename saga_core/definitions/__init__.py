"""What a saga is, as data: definitions, the tool catalogue, templates, inputs, budgets and
conditions, and the registration-time rules that validate them.

* :mod:`saga_core.definitions.budgets` — Budgets as data: a saga's time limit and cost budget,
  tool costs, and the fold's ledger.
* :mod:`saga_core.definitions.catalogue` — The tool catalogue as data: what each allowlisted
  tool does, returns and how it is undone.
* :mod:`saga_core.definitions.conditions` — Declared conditions of a tool contract and a
  definition: postconditions and deadline policies.
* :mod:`saga_core.definitions.definition` — Saga definitions as data: steps, compensations,
  retry and approval policies, input fields.
* :mod:`saga_core.definitions.derived` — What is derived from a definition alone, kept per
  process by the definition's identity.
* :mod:`saga_core.definitions.documents` — Reading untrusted YAML and JSON text with bounded
  cost: the one loader for documents.
* :mod:`saga_core.definitions.input_schema` — Input fields as JSON Schema (Draft 2020-12),
  checked by the ``jsonschema`` library.
* :mod:`saga_core.definitions.inputs` — Saga input validation against a definition's declared
  input fields.
* :mod:`saga_core.definitions.secret_flow` — Secrets are tainted values: where a secret input
  may flow in a definition, and where not.
* :mod:`saga_core.definitions.templates` — Argument templates: JSON values whose strings may
  reference the saga input and receipts.
* :mod:`saga_core.definitions.validation` — Registration-time validation of saga definitions:
  every problem at once, each naming its step.
"""

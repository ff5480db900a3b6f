"""The principal directory: the people and agents of each tenant, their tokens and signing
keys; the port with its PostgreSQL and in-memory adapters.

* :mod:`application.principals.directory` — The principal directory: who the people and agents
  of each tenant are, and how they prove it.
* :mod:`application.principals.identities` — External identities: a person signed in by the
  company's OpenID provider, bound to a person principal (migration
  ``0018_principal_identities.sql``).
* :mod:`application.principals.memory` — The in-memory principal directory
  (``sagafleet.testing``): the PostgreSQL one's promises, held by the same contract tests, in
  dictionaries behind one lock.
* :mod:`application.principals.postgres` — The principal directory in PostgreSQL:
  ``fleet.principals``, ``fleet.principal_tokens`` and ``fleet.signing_keys`` (migration
  ``0005_principals.sql``).
"""

"""Who may do what: principals, roles and the permission rule, and the signed command envelope.

* :mod:`saga_core.access.roles` — Who may do what: the principals of a tenant, their roles, and
  the allow-only permission rule.
* :mod:`saga_core.access.signed_envelopes` — Signed agent commands: the message layout, the
  envelope, and the pure checks of both.
"""

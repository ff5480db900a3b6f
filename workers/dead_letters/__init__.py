"""Dead letters: broker messages that can never succeed, kept for an operator with every
secret withheld and the tenant proven when they were kept; and the rule that decides.

* :mod:`workers.dead_letters.failures` — Which failures of an agent command are retried and
  which are dead-lettered (the one rule).
* :mod:`workers.dead_letters.store` — Dead letters: broker messages that can never succeed, kept
  whole for an operator.
* :mod:`workers.dead_letters.tenants` — Whose a dead letter is: the tenant proven at the moment
  a message is dead-lettered.
* :mod:`workers.dead_letters.withholding` — What a dead letter may keep of a refused message:
  every secret withheld, always.
"""

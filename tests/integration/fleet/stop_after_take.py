"""A consumer that stops itself (SIGSTOP) the moment its transport has taken a message.

    python stop_after_take.py BROKER_URL {kombu|reliable} QUEUE

Run by test_atomic_consume.py: the test waits for the stop (``waitpid`` with
``WUNTRACED``, no timing), then SIGKILLs it -- a worker killed right after the take,
before anything of the message reached its handler. ``kombu`` is kombu's own Redis
transport, ``reliable`` the fleet's (workers.reliable_redis). Test-only: the stop is a
subclass of the transport under test, overriding only the hand-over to the consumer.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from kombu import Connection, Consumer, Exchange, Queue
from kombu.transport import redis as kombu_redis

from workers.reliable_redis import Transport as ReliableTransport


def stopping(base: type) -> type:
    """``base`` whose hand-over of a taken message to the consumer stops the process."""

    class StopAfterTake(base):  # type: ignore[misc, valid-type]
        def _deliver(self, message: Any, queue: str) -> None:
            os.kill(os.getpid(), signal.SIGSTOP)
            super()._deliver(message, queue)

    return StopAfterTake


def main(broker: str, kind: str, queue: str) -> None:
    base = {"kombu": kombu_redis.Transport, "reliable": ReliableTransport}[kind]
    connection = Connection(broker)
    # Set after construction: kombu keeps "redis" for a redis+socket:// URL whatever
    # transport is passed in.
    connection.transport_cls = stopping(base)
    with connection:
        consumer = Consumer(connection.channel(), [Queue(queue, Exchange(queue), queue)],
                            no_ack=False, callbacks=[lambda body, message: None])
        with consumer:
            while True:
                try:
                    connection.drain_events(timeout=1)
                except TimeoutError:
                    continue


if __name__ == "__main__":
    main(*sys.argv[1:4])

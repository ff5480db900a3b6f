"""What sits in Redis: the command messages a restart is about to drop, and whether any
command is still queued or unacknowledged (kombu's Redis transport layout: one list per
queue and priority, ``queue\\x06\\x16N`` for priority N, and the ``unacked`` hash of
``[message, exchange, routing_key]`` for messages a worker holds until it acknowledges)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from workers.celery_app import QUEUE_COMMANDS, broker_redis


@dataclass(frozen=True)
class BrokerSnapshot:
    """Task ids of command messages in Redis, queued or held unacknowledged by a worker."""

    queued: frozenset[str]
    unacked: frozenset[str]
    step_messages: int  # step wake-ups in Redis too (the sweeper re-creates those)

    @property
    def command_ids(self) -> frozenset[str]:
        """Every command message Redis holds."""
        return self.queued | self.unacked


def _task_id(message: object) -> tuple[str | None, str]:
    """(task id, task name) of a kombu message dict; (None, '') when it is not one."""
    if not isinstance(message, dict):
        return None, ""
    headers = message.get("headers") or {}
    return headers.get("id"), str(headers.get("task", ""))


def _queue_keys(client: redis.Redis, queue: str) -> Iterator[bytes]:
    yield from client.scan_iter(match=f"{queue}*".encode())


def snapshot(broker_url: str, sentinel_master: str | None = None) -> BrokerSnapshot:
    """Read every command message Redis holds right now, queues and the unacked hash in
    one transaction (a message moving between them is seen once); raises redis errors
    when Redis is down. ``sentinel_master``: as for ``broker_redis``."""
    client = broker_redis(broker_url, sentinel_master)
    try:
        lists = [key for queue in (QUEUE_COMMANDS, "sagafleet.steps")
                 for key in _queue_keys(client, queue) if client.type(key) == b"list"]
        with client.pipeline(transaction=True) as pipe:
            for key in lists:
                pipe.lrange(key, 0, -1)
            pipe.hvals("unacked")
            *contents, unacked_values = pipe.execute()
        queued: set[str] = set()
        steps = 0
        for key, items in zip(lists, contents, strict=True):
            if not key.startswith(QUEUE_COMMANDS.encode()):
                steps += len(items)
                continue
            for raw in items:
                task_id, _ = _task_id(json.loads(raw))
                if task_id:
                    queued.add(task_id)
        unacked: set[str] = set()
        for raw in unacked_values:
            entry = json.loads(raw)
            task_id, task = _task_id(entry[0] if isinstance(entry, list) and entry else None)
            if task_id and task.startswith("sagafleet.commands."):
                unacked.add(task_id)
            else:
                steps += 1
        return BrokerSnapshot(frozenset(queued), frozenset(unacked), steps)
    finally:
        client.close()

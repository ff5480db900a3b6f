"""A field the definition marks secret never reaches the log, broker, read models or logs."""

from __future__ import annotations

import time

import psycopg
from fleet_harness import redis_client
from psycopg import sql
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from sagafleet.sandbox import ledger_for_saga

SECRET = "tok_live_SECRET_4242_do_not_leak"


def _every_text_column(database: str) -> str:
    """Every row of every table outside the system schemas, as text."""
    dump = []
    with psycopg.connect(database) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE'"
        ).fetchall()
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table))
            dump.extend(row[0] for row in conn.execute(query).fetchall())
    return "\n".join(dump)


def _vault_size(database: str) -> int:
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT count(*) FROM fleet.secrets").fetchone()
    return int(row[0]) if row else 0


def _broker_contents(broker: str) -> bytes:
    client = redis_client(broker)
    chunks = []
    for key in client.scan_iter("*"):
        kind = client.type(key)
        if kind == b"list":
            chunks.extend(client.lrange(key, 0, -1))
        elif kind == b"hash":
            chunks.extend(client.hgetall(key).values())
        elif kind == b"zset":
            chunks.extend(client.zrange(key, 0, -1))
        elif kind == b"string":
            chunks.append(client.get(key) or b"")
    return b"\n".join(chunks)


def test_secret_input_is_used_by_the_tool_but_stored_nowhere_in_clear(
    fleet, database, broker, workers, wait_settled, sweeper, tmp_path
):
    # given a trip whose card token is a secret input, and a real worker
    workers.start(1)
    saga = fleet.client().start("trip", {**TRIP_INPUT, "card_token": SECRET}, key="secret")
    # while the saga is queued, the broker never carries the token
    assert SECRET.encode() not in _broker_contents(broker)
    # when it completes (the payment provider did receive the token: it charged the card)
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    assert ledger_for_saga(fleet.sandbox_pool, saga.saga_id).captured == TRIP_INPUT["amount"]
    # the sweeper notices the end and purges the vault (once the end is below the log's
    # snapshot horizon, which other transactions on the server may hold back a while)
    deadline = time.monotonic() + 60
    while _vault_size(database):
        assert time.monotonic() < deadline, "the sweeper never purged the finished saga's secrets"
        sweeper.sweep()
        time.sleep(0.2)
    # then the token is in no table (log, read models, vault, ledgers, dead letters)
    assert SECRET not in _every_text_column(database)
    # nor in the broker, nor in the worker's log
    assert SECRET.encode() not in _broker_contents(broker)
    for log in tmp_path.glob("*.log"):
        assert SECRET not in log.read_text(errors="replace")
    # and the log holds a placeholder where the value was given
    started = fleet.repo.load_history(saga.saga_id).events[0]
    assert started.input["card_token"] == {"$secret": "card_token"}

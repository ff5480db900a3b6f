"""Looking for a secret everywhere a fleet keeps or says anything: every row of every table of
every schema (as text), every key and value of the broker's database (whatever its type),
every process's log, and whatever else a test captured (CLI output, MCP answers, pages).
Each scan says where it looked and how much, so a test can quote it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from fleet_harness import redis_client
from psycopg import sql


@dataclass
class LeakScan:
    """Where a value was looked for, how much was read, and where it was found."""

    tables: int = 0
    rows: int = 0
    broker_keys: int = 0
    broker_values: int = 0
    log_files: int = 0
    log_lines: int = 0
    captured: int = 0
    hits: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)  # found where it may be (the vault)

    @property
    def places(self) -> int:
        """Tables, the broker's keys, log files and captured answers looked through."""
        return self.tables + self.broker_keys + self.log_files + self.captured

    def summary(self) -> str:
        """One line for a test's output and a report."""
        return (f"{self.places} places scanned: {self.tables} tables ({self.rows} rows), "
                f"{self.broker_keys} broker keys ({self.broker_values} values), "
                f"{self.log_files} process logs ({self.log_lines} lines), {self.captured} "
                f"captured outputs; hits = {len(self.hits)}"
                + (f" (in the vault while live: {len(self.allowed)})" if self.allowed else ""))


def broker_dump(broker: str) -> tuple[int, list[bytes]]:
    """How many keys the broker's database holds, and every key and value in it."""
    client = redis_client(broker)
    keys, chunks = 0, []
    try:
        for key in client.scan_iter("*"):
            keys += 1
            chunks.append(key)
            kind = client.type(key)
            if kind == b"string":
                chunks.append(client.get(key) or b"")
            elif kind == b"list":
                chunks.extend(client.lrange(key, 0, -1))
            elif kind == b"hash":
                for name, value in client.hgetall(key).items():
                    chunks.extend((name, value))
            elif kind == b"set":
                chunks.extend(client.smembers(key))
            elif kind == b"zset":
                chunks.extend(client.zrange(key, 0, -1))
            elif kind == b"stream":
                for _, entry in client.xrange(key):
                    for name, value in entry.items():
                        chunks.extend((name, value))
            elif kind != b"none":  # none: emptied between SCAN and TYPE (a drained queue)
                raise AssertionError(f"broker key {key!r} has a type the scan cannot read: "
                                     f"{kind!r}")
    finally:
        client.close()
    return keys, chunks


def database_dump(database: str) -> dict[str, list[str]]:
    """Every row of every table of every schema (the event log included), as text."""
    dump: dict[str, list[str]] = {}
    with psycopg.connect(database) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE' ORDER BY 1, 2").fetchall()
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table))
            dump[f"{schema}.{table}"] = [r[0] for r in conn.execute(query).fetchall()]
    return dump


def scan_for(value: str, *, database: str, broker: str, logs: Iterable[Path],
             captured: Mapping[str, str] = {}, vault: Iterable[str] = ()) -> LeakScan:  # noqa: B006
    """Look for ``value`` everywhere; a hit in a ``vault`` table is allowed, not a leak."""
    scan = LeakScan()
    allowed = set(vault)
    for table, rows in database_dump(database).items():
        scan.tables += 1
        scan.rows += len(rows)
        found = sum(value in row for row in rows)
        if found:
            (scan.allowed if table in allowed else scan.hits).append(
                f"table {table}: {found} rows")
    scan.broker_keys, chunks = broker_dump(broker)
    scan.broker_values = len(chunks) - scan.broker_keys
    if any(value.encode() in chunk for chunk in chunks):
        scan.hits.append("the broker")
    for path in sorted(logs):
        text = path.read_text(errors="replace")
        scan.log_files += 1
        scan.log_lines += text.count("\n")
        if value in text:
            scan.hits.append(f"log {path.name}")
    for name, text in captured.items():
        scan.captured += 1
        if value in text:
            scan.hits.append(f"captured {name}")
    return scan

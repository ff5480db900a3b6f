"""Reading and writing the rows of one table set (all SQL parameterised, names allowlisted)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from projections.rows import QueueRow, SagaRows, StepRunRow, SummaryRow, columns
from projections.tables import table

_JSON_COLUMNS = frozenset({"receipt", "evidence"})
_KEYS = {
    "saga_summary": ("saga_id",),
    "step_runs": ("saga_id", "step_id", "kind"),
    "operator_queue": ("saga_id", "entry", "step_id", "kind"),
}
_ROW_TYPES: dict[str, type] = {
    "saga_summary": SummaryRow,
    "step_runs": StepRunRow,
    "operator_queue": QueueRow,
}


def _values(row: object, names: list[str]) -> list[Any]:
    values = [getattr(row, name) for name in names]
    return [
        Jsonb(v) if name in _JSON_COLUMNS and v is not None else v
        for name, v in zip(names, values, strict=True)
    ]


def _upsert(base: str, version: int) -> sql.Composed:
    names = columns(_ROW_TYPES[base])
    keys = _KEYS[base]
    return sql.SQL(
        "INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({keys}) DO UPDATE SET {set}"
    ).format(
        t=table(base, version),
        cols=sql.SQL(", ").join(map(sql.Identifier, names)),
        vals=sql.SQL(", ").join(sql.Placeholder() * len(names)),
        keys=sql.SQL(", ").join(map(sql.Identifier, keys)),
        set=sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(n))
            for n in names
            if n not in keys
        ),
    )


class TableSetWriter:
    """Writes changed rows of sagas into one table set, inside the caller's transaction."""

    def __init__(self, version: int) -> None:
        self.version = version
        self._summary = _upsert("saga_summary", version)
        self._steps = _upsert("step_runs", version)
        self._queue_insert = _upsert("operator_queue", version)
        self._queue_clear = sql.SQL("DELETE FROM {t} WHERE saga_id = ANY(%s)").format(
            t=table("operator_queue", version)
        )
        self._copies = {
            base: sql.SQL("COPY {t} ({cols}) FROM STDIN").format(
                t=table(base, version),
                cols=sql.SQL(", ").join(map(sql.Identifier, columns(row_type))),
            )
            for base, row_type in _ROW_TYPES.items()
        }

    def insert_new(self, conn: psycopg.Connection[Any], sagas: Sequence[SagaRows]) -> int:
        """Add the rows of sagas the table set does not hold yet, by COPY (a rebuild's bulk
        phase: each saga written once into a new set). Far cheaper than upserting row by
        row on both sides; a saga already present violates the primary key, loudly."""
        rows: dict[str, list[object]] = {base: [] for base in _ROW_TYPES}
        for saga in sagas:
            rows["saga_summary"].append(saga.summary)
            rows["step_runs"].extend(saga.steps)
            rows["operator_queue"].extend(saga.queue)
        written = 0
        with conn.cursor() as cur:
            for base, found in rows.items():
                if not found:
                    continue
                names = columns(_ROW_TYPES[base])
                with cur.copy(self._copies[base]) as copy:
                    for row in found:
                        copy.write_row(_values(row, names))
                written += len(found)
        return written

    def write(
        self,
        conn: psycopg.Connection[Any],
        changes: Sequence[tuple[SagaRows, SagaRows | None]],
    ) -> int:
        """Write ``(new, previous)`` rows of each saga (previous None: unknown, write all)."""
        summaries: list[list[Any]] = []
        steps: list[list[Any]] = []
        queue_sagas: list[str] = []
        queue_rows: list[list[Any]] = []
        summary_cols, step_cols = columns(SummaryRow), columns(StepRunRow)
        queue_cols = columns(QueueRow)
        for new, old in changes:
            if old is None or new.summary != old.summary:
                summaries.append(_values(new.summary, summary_cols))
            before = {s.key: s for s in old.steps} if old is not None else {}
            steps.extend(_values(s, step_cols) for s in new.steps if before.get(s.key) != s)
            if old is None or new.queue != old.queue:
                queue_sagas.append(new.summary.saga_id)
                queue_rows.extend(_values(q, queue_cols) for q in new.queue)
        with conn.cursor() as cur:
            if summaries:
                cur.executemany(self._summary, summaries)
            if steps:
                cur.executemany(self._steps, steps)
            if queue_sagas:
                cur.execute(self._queue_clear, (queue_sagas,))
            if queue_rows:
                cur.executemany(self._queue_insert, queue_rows)
        return len(summaries) + len(steps) + len(queue_rows)


def stream_versions(
    conn: psycopg.Connection[Any], version: int, saga_ids: Iterable[str]
) -> dict[str, int]:
    """The stream version each saga's summary reflects (absent: nothing applied yet)."""
    query = sql.SQL("SELECT saga_id, stream_version FROM {t} WHERE saga_id = ANY(%s)").format(
        t=table("saga_summary", version)
    )
    return {sid: int(v) for sid, v in conn.execute(query, (list(saga_ids),))}


@dataclass(frozen=True)
class StoredRows:
    """One saga's rows as stored (summary None: step or queue rows without a summary)."""

    summary: SummaryRow | None
    steps: tuple[StepRunRow, ...]
    queue: tuple[QueueRow, ...]


def _fetch(
    conn: psycopg.Connection[Any], base: str, version: int, where: sql.Composable, params: Any
) -> list[Any]:
    row_type = _ROW_TYPES[base]
    cols = sql.SQL(", ").join(map(sql.Identifier, columns(row_type)))
    query = sql.SQL("SELECT {cols} FROM {t}").format(cols=cols, t=table(base, version)) + where
    cur: psycopg.Cursor[Any] = conn.cursor(row_factory=class_row(row_type))
    with cur:
        return cur.execute(query, params).fetchall()


def read_rows(
    conn: psycopg.Connection[Any], version: int, saga_ids: Sequence[str] | None = None
) -> dict[str, StoredRows]:
    """Stored rows of the given sagas (all sagas when None), grouped per saga."""
    where = sql.SQL(" WHERE saga_id = ANY(%s)") if saga_ids is not None else sql.SQL("")
    params = (list(saga_ids),) if saga_ids is not None else ()
    summaries = {r.saga_id: r for r in _fetch(conn, "saga_summary", version, where, params)}
    steps: dict[str, list[StepRunRow]] = {}
    for step in _fetch(conn, "step_runs", version, where, params):
        steps.setdefault(step.saga_id, []).append(step)
    queue: dict[str, list[QueueRow]] = {}
    for entry in _fetch(conn, "operator_queue", version, where, params):
        queue.setdefault(entry.saga_id, []).append(entry)
    return {
        sid: StoredRows(summaries.get(sid), tuple(steps.get(sid, ())), tuple(queue.get(sid, ())))
        for sid in summaries.keys() | steps.keys() | queue.keys()
    }

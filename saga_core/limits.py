"""Every size limit of sagafleet's entries, in one place, each with the reason for its value.

An entry (a definition file, an agent plan, a saga input, an MCP request, a Celery command,
an operator's reason, a read command's page) accepts nothing whose processing could cost
more than a small multiple of the limit: every check here runs *before* any work that can
amplify its input (YAML alias expansion, pydantic copies, hashing, graph walks), and the
measuring itself stops as soon as a limit is passed, so even an in-process value built of
shared references (a list holding itself a billion times over) is refused in bounded time.

A violation is a :class:`LimitExceeded` (``ErrorKind.INVALID_INPUT``) that names the limit,
the thing measured and the size seen. The table of docs/limits.md lists the same values;
``tests/unit/hostile/test_limits_table.py`` keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from saga_core.canonical_json import canonical_json
from saga_core.errors import ErrorKind, SagaError

KIB: Final = 1024


@dataclass(frozen=True)
class Limit:
    """One declared bound: its name (as errors and docs/limits.md say it), value, unit and why."""

    name: str
    value: int
    unit: str
    why: str

    def check(self, what: str, seen: int) -> None:
        """Raise :class:`LimitExceeded` when ``seen`` (the size of ``what``) is over the limit."""
        if seen > self.value:
            raise LimitExceeded(self, what, seen)


class LimitExceeded(SagaError):
    """An input is bigger (or deeper, or wider) than a declared limit allows.

    The message names what was measured, the size seen and the limit by name, e.g.
    ``definition file trip.yaml is 300000 bytes, which exceeds the limit definition_bytes
    of 262144 bytes``.
    ``at_least`` says the measuring stopped early: the input is at least ``seen`` big.
    """

    kind = ErrorKind.INVALID_INPUT
    hint = "make the input smaller; docs/limits.md lists every limit"

    def __init__(self, limit: Limit, what: str, seen: int, *, at_least: bool = False) -> None:
        self.limit = limit
        self.what = what
        self.seen = seen
        self.at_least = at_least
        unit = f" {limit.unit}" if limit.unit else ""
        size = f"at least {seen}" if at_least else str(seen)
        super().__init__(
            f"{what} is {size}{unit}, which exceeds the limit {limit.name} of {limit.value}{unit}"
        )


# -- documents: definitions and plans ------------------------------------------------------

DEFINITION_BYTES: Final = Limit(
    "definition_bytes", 256 * KIB, "bytes",
    "a definition file (YAML or JSON) or document; the example trip is 3 KiB, and 200 steps "
    "of about a kilobyte each fit with room to spare. Checked on the text before parsing.",
)
YAML_NODES: Final = Limit(
    "yaml_nodes", 50_000, "nodes",
    "YAML nodes a document may expand to, counting every alias as the whole node it "
    "repeats: aliases stay usable, but nine lists of nine aliases (a billion nodes from "
    "3 KB) are refused by the loader while it composes, before anything is built.",
)
JSON_DEPTH: Final = Limit(
    "json_depth", 100, "levels",
    "how deeply arrays and objects may nest in a document, arguments, inputs and event "
    "data: every reader of the log (JSON decoders, folds, hashing, template walks) must be "
    "able to walk them back without running out of stack.",
)
DEFINITION_STEPS: Final = Limit(
    "definition_steps", 200, "steps",
    "steps in one definition: validation and the fold keep per-step ancestor sets "
    "(quadratic in steps), so the bound keeps them to tens of thousands of entries.",
)
DEPENDENCY_EDGES: Final = Limit(
    "dependency_edges", 2_000, "edges",
    "depends_on entries summed over a definition's steps (ten per step on average): graph "
    "checks and ancestor walks cost steps x edges.",
)
TEMPLATE_REFERENCES: Final = Limit(
    "template_references", 64, "references",
    "${...} references in one operation's templates (its args and precondition, forward "
    "or compensation): resolving them copies the referenced values, so one operation's "
    "arguments are at most 64 x saga_input_bytes (4 MiB) plus the template itself.",
)
INVARIANT_CHARS: Final = Limit(
    "invariant_chars", 2_000, "characters",
    "a definition's business invariant in plain language: a sentence or a short paragraph "
    "a person reads in the operator queue's evidence and in audit, copied into every "
    "escalation's evidence.",
)
RECEIPT_CONDITIONS: Final = Limit(
    "receipt_conditions", 16, "conditions",
    "conditions over receipt fields in one tool's postcondition: each is evaluated on every "
    "receipt and lookup of the tool's calls, and a postcondition is a short, declared check, "
    "not a program.",
)
CONDITION_VALUES: Final = Limit(
    "condition_values", 64, "values",
    "values one `in`/`not_in` receipt condition lists: a handful of accepted statuses, "
    "compared by equality against one receipt field.",
)
PLAN_BYTES: Final = Limit(
    "plan_bytes", 256 * KIB, "bytes",
    "an agent plan (its actions and goal, as canonical JSON): the same room as a "
    "definition, because a plan becomes one.",
)
PLAN_ACTIONS: Final = Limit(
    "plan_actions", 100, "actions",
    "actions in one agent plan: a plan is a short, reviewable sequence of tool calls, and "
    "every action becomes a step (definition_steps bounds the rest).",
)

INPUT_SCHEMA_DEPTH: Final = Limit(
    "input_schema_depth", 8, "levels",
    "how deeply an input field's properties and items may nest: a saga input is a form an "
    "agent fills, and every level adds a pass of the JSON Schema validator over its values.",
)
INPUT_PATTERN_CHARS: Final = Limit(
    "input_pattern_chars", 1_000, "characters",
    "a regular expression an input field's pattern may hold; nested quantifiers (the "
    "backtracking shape, such as (a+)+) are refused whatever their length.",
)

# -- saga calls ----------------------------------------------------------------------------

SAGA_INPUT_BYTES: Final = Limit(
    "saga_input_bytes", 64 * KIB, "bytes",
    "a saga's input as canonical JSON: it is stored on SagaStarted, folded on every load "
    "and copied into arguments by templates (see template_references).",
)
INPUT_TEXT_BYTES: Final = Limit(
    "input_text_bytes", 256 * KIB, "bytes",
    "the text of `sagafleet start --input` (inline, @FILE or stdin) before it is parsed: "
    "room for indentation and escapes around a saga_input_bytes input.",
)
EVIDENCE_BYTES: Final = Limit(
    "evidence_bytes", 64 * KIB, "bytes",
    "an operator's evidence on resolve, as canonical JSON: it is stored on the event and "
    "shown in the queue and audit.",
)
NAME_CHARS: Final = Limit(
    "name_chars", 200, "characters",
    "a definition name, step id, tenant or actor a client call accepts.",
)
KEY_CHARS: Final = Limit(
    "key_chars", 200, "characters",
    "an idempotency key: it is hashed into the saga id and shown to operators.",
)
REASON_CHARS: Final = Limit(
    "reason_chars", 10_000, "characters",
    "a free-text reason an operator or client gives (start, cancel, deny, resolve): a "
    "paragraph or a pasted ticket, recorded on the event.",
)
AGENT_REASON_CHARS: Final = Limit(
    "agent_reason_chars", 2_000, "characters",
    "a reason an agent gives through the MCP gateway: a sentence or two, as the tool says.",
)
LINEAGE_CHARS: Final = Limit(
    "lineage_chars", 200, "characters",
    "one lineage field of a saga start (agent request id, model name or version, prompt or "
    "policy version): an identifier, not a document; recorded on SagaStarted and shown by "
    "audit.",
)
SECRET_VALUE_BYTES: Final = Limit(
    "secret_value_bytes", 64 * KIB, "bytes",
    "a secret deposited with put_secret, as JSON: a token, a key or a small credential "
    "document, kept in the vault until its start redeems it.",
)

# -- transports ----------------------------------------------------------------------------

MCP_BODY_BYTES: Final = Limit(
    "mcp_body_bytes", 1024 * KIB, "bytes",
    "one HTTP request body of `sagafleet mcp --http`: the largest plan or input plus the "
    "JSON-RPC envelope and escaping. Refused by Content-Length before reading, or as soon "
    "as the streamed body passes it.",
)
COMMAND_MESSAGE_BYTES: Final = Limit(
    "command_message_bytes", 512 * KIB, "bytes",
    "the arguments of one sagafleet.commands.* Celery message: a plan or an input plus "
    "names and a reason. The worker dead-letters a bigger one before building any model.",
)
STEP_MESSAGE_BYTES: Final = Limit(
    "step_message_bytes", 4 * KIB, "bytes",
    "the arguments of one internal sagafleet.step message: (saga_id, step_id, kind, "
    "attempt) needs a few hundred bytes; payloads live in the log.",
)

# -- read commands -------------------------------------------------------------------------

POSITION_MAX: Final = Limit(
    "position_max", 2**63 - 1, "",
    "the highest global position (and xid) `audit --at` accepts: PostgreSQL's bigint.",
)
QUEUE_PAGE_ROWS: Final = Limit(
    "queue_page_rows", 1_000, "rows",
    "operator-queue entries one `sagafleet queue` prints (--limit, default the maximum): "
    "a page a person can read, the nearest deadlines first.",
)
SAGA_PAGE_ROWS: Final = Limit(
    "saga_page_rows", 1_000, "rows",
    "sagas one `sagafleet list` prints (--limit, default 100), newest first; the next page "
    "starts after the last one shown (--after).",
)
BATCH_EVENTS: Final = Limit(
    "batch_events", 10_000, "events",
    "events one projector or rebuild transaction reads (--batch): a page held in memory "
    "at once.",
)

TRACE_EVENTS: Final = Limit(
    "trace_events", 10_000, "events",
    "events one `sagafleet find --trace` reads: every event of the sagas one agent request "
    "(one trace) started, oldest first; a trace with more is cut there and says so.",
)

ALL_LIMITS: Final[tuple[Limit, ...]] = (
    DEFINITION_BYTES, YAML_NODES, JSON_DEPTH, DEFINITION_STEPS, DEPENDENCY_EDGES,
    TEMPLATE_REFERENCES, INVARIANT_CHARS, RECEIPT_CONDITIONS, CONDITION_VALUES,
    PLAN_BYTES, PLAN_ACTIONS, INPUT_SCHEMA_DEPTH, INPUT_PATTERN_CHARS,
    SAGA_INPUT_BYTES, INPUT_TEXT_BYTES,
    EVIDENCE_BYTES, NAME_CHARS, KEY_CHARS, REASON_CHARS, AGENT_REASON_CHARS,
    LINEAGE_CHARS, SECRET_VALUE_BYTES, MCP_BODY_BYTES,
    COMMAND_MESSAGE_BYTES, STEP_MESSAGE_BYTES, POSITION_MAX, QUEUE_PAGE_ROWS, SAGA_PAGE_ROWS,
    BATCH_EVENTS, TRACE_EVENTS,
)
"""Every limit, in the order of docs/limits.md's table."""


# -- measuring without amplifying ----------------------------------------------------------

_SCALAR_BYTES: Final = {bool: 4, type(None): 4}

_LEAVES: Final = frozenset({str, int, float, bool, type(None)})
"""Exact types with nothing below them. Told apart by ``type`` before any ``isinstance``
against ``Mapping`` (an ABC, slow to ask), which every start's input would otherwise pay
for each of its values."""


def _lower_bound(item: Any) -> int:
    """Fewest canonical-JSON bytes ``item`` takes, its children and their keys left out."""
    kind = type(item)
    if kind is str:
        return len(item) + 2  # a UTF-8 byte per character at least, and the quotes
    if kind is int:
        return 1 + int(max(0, item.bit_length() - 1) * 0.30103)  # decimal digits, at least
    if kind in _SCALAR_BYTES:
        return _SCALAR_BYTES[kind]
    if kind is float:
        return 1  # a digit at least
    if kind is dict or isinstance(item, Mapping):
        # braces, a colon and quotes per key, commas between members
        return 2 + sum(len(k) + 3 if isinstance(k, str) else 3 for k in item) + max(
            0, len(item) - 1)
    if isinstance(item, list | tuple):
        return 2 + max(0, len(item) - 1)  # brackets and commas
    return 1  # anything canonical JSON refuses (its validation says so)


def measure_json(what: str, value: Any, limit: Limit, *, depth: Limit = JSON_DEPTH) -> int:
    """The canonical-JSON size of ``value`` in bytes, or :class:`LimitExceeded`.

    Walks level by level (no recursion) adding a lower bound of each item's size (its
    characters, brackets, commas, keys; a mapping's keys are summed in one pass, bounded
    by the mapping's own length) and stops as soon as that passes ``limit`` or the
    nesting passes ``depth``: a value of shared references is refused after at most
    ``limit`` items, however many times it repeats them. Only a value proven small by the
    walk is encoded for its exact size, which then costs a small multiple of the limit.
    """
    total, level, levels = 0, [value], 0
    while level:
        below: list[Any] = []
        containers = False  # a level holding an array or object is one level of nesting
        for item in level:
            total += _lower_bound(item)
            if total > limit.value:
                raise LimitExceeded(limit, what, total, at_least=True)
            if type(item) in _LEAVES:
                continue
            if isinstance(item, Mapping):
                below.extend(item.values())
                containers = True
            elif isinstance(item, list | tuple):
                below.extend(item)
                containers = True
        levels += containers
        depth.check(f"{what} nesting", levels)
        level = below
    try:
        exact = len(canonical_json(value).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError):
        return total  # not JSON at all: the entry's own validation says what is wrong
    limit.check(what, exact)
    return exact


def measure_text(what: str, text: str | bytes, limit: Limit) -> int:
    """The size of a text in UTF-8 bytes (its length for bytes), or :class:`LimitExceeded`.

    Counted without encoding a text that is longer in characters than the limit in bytes.
    """
    if isinstance(text, bytes):
        size = len(text)
    elif len(text) > limit.value:
        raise LimitExceeded(limit, what, len(text), at_least=True)
    else:
        size = len(text.encode("utf-8", "surrogatepass"))
    limit.check(what, size)
    return size


def json_text_depth(what: str, text: str, limit: Limit = JSON_DEPTH) -> None:
    """Refuse JSON text whose arrays and objects nest deeper than ``limit``, before parsing.

    A scan of brackets outside strings (not a parse): the decoders recurse per level, so
    a 256 KiB file of ``[`` must be refused before one of them sees it.
    """
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit.value:
                raise LimitExceeded(limit, f"{what} nesting", depth, at_least=True)
        elif char in "]}":
            depth -= 1


def check_command_message(args: Any, kwargs: Any) -> int:
    """The size of a sagafleet.commands.* Celery message's arguments, or
    :class:`LimitExceeded` (the worker dead-letters it before building any model)."""
    return measure_json("command message", [args, kwargs], COMMAND_MESSAGE_BYTES)

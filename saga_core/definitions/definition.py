"""Saga definitions as data: steps, compensations, retry and approval policies, input fields.

A definition is a versioned pydantic model another process can load later (JSON or YAML) and
identify by a stable content hash; it never holds Python callables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from functools import cached_property
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from saga_core.access.roles import ROLE_NAME
from saga_core.approval.risk_gates import AmountLimit
from saga_core.contracts import EFFECT_FREE_SEMANTICS, Semantics, StepKind
from saga_core.definitions.budgets import SagaBudget, money
from saga_core.definitions.catalogue import ToolSpec
from saga_core.definitions.conditions import CompensationDeadlinePolicy, DeadlinePolicy
from saga_core.definitions.documents import load_document
from saga_core.errors import DefinitionError, Problem
from saga_core.field_errors import field_errors
from saga_core.keys import JsonArgs, payload_hash, text_problem
from saga_core.limits import DEFINITION_BYTES, DEFINITION_STEPS, INVARIANT_CHARS, measure_json

_NAME = r"^[a-z][a-z0-9_.\-]*$"
_STEP_ID = r"^[a-z][a-z0-9_]*$"
NAME_CHARS = 128
"""The longest definition name."""
_NAME_SHAPE = re.compile(_NAME.removesuffix("$") + r"\Z")  # $ would let a final newline in


def definition_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a definition (what registration enforces), or None. Asked
    before a lookup by a name a caller gave, on every path (a start, a filter, a tool call):
    a name no definition can have is invalid input, not a database error. Never quotes it."""
    if not isinstance(name, str):
        return f"a definition name is a string, not {type(name).__name__}"
    problem = text_problem(name)
    if problem is not None:
        return f"a definition name is plain text: {problem}"
    if not 0 < len(name) <= NAME_CHARS or not _NAME_SHAPE.match(name):
        return (f"a definition name is 1 to {NAME_CHARS} characters: a lowercase letter, then "
                "lowercase letters, digits, '_', '.' or '-'")
    return None


def _omit_unset(data: Any, names: tuple[str, ...]) -> Any:
    """Drop fields added after definitions were first stored while they hold their unset
    value (None, {} or ""), so a definition that does not use them dumps, and hashes, as
    before they existed."""
    if isinstance(data, dict):
        for name in names:
            if name in data and data[name] in (None, {}, ""):
                del data[name]
    return data


class RetryPolicy(BaseModel):
    """Bounded retries: exponential backoff with full jitter, capped; both bounds are required."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # None is accepted by the model so that validation can name the step that lacks a bound.
    max_attempts: int | None = Field(default=None, ge=1)
    max_delay_s: float | None = Field(default=None, gt=0)
    base_delay_s: float = Field(default=1.0, gt=0)
    max_reconciliations: int = Field(default=5, ge=1)


DEFAULT_RETRY = RetryPolicy(max_attempts=3, base_delay_s=1.0, max_delay_s=60.0)


class ApprovalPolicy(BaseModel):
    """When a human must approve an action, and how long requests and grants stay valid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    required: bool = False
    above: AmountLimit | None = None
    scope: str | None = None
    request_ttl_s: float = Field(default=3600.0, gt=0)
    grant_ttl_s: float = Field(default=900.0, gt=0)
    # Who may approve and whether the saga's starter is excluded; None: the tool's catalogue
    # gate decides (or the defaults, approver and four eyes). A definition may make a gate
    # stricter, never weaker (saga_core.approval.policy).
    role: str | None = None
    four_eyes: bool | None = None

    @field_validator("role")
    @classmethod
    def _role_name(cls, role: str | None) -> str | None:
        if role is not None and not ROLE_NAME.match(role):
            raise ValueError(f"a role must match {ROLE_NAME.pattern}")
        return role

    @model_serializer(mode="wrap")
    def _omit_unset_authority(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Unset, they dump as before they existed: stored definitions keep their hashes.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("role", "four_eyes"):
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    def applies(self, args: dict[str, Any]) -> bool:
        """Whether these resolved arguments need an approval under this policy."""
        if self.required:
            return True
        return self.above is not None and self.above.exceeded(args)


class CompensationCommand(BaseModel):
    """A versioned command that undoes, offsets or corrects a forward step; data, not a closure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(min_length=1)
    version: int = Field(default=1, ge=1)
    args: JsonArgs = Field(default_factory=dict)
    # Resolved like args and handed to the tool, which raises PreconditionFailed when the
    # target changed since the forward step (e.g. {"expect_version": "${receipt.version}"}).
    precondition: JsonArgs = Field(default_factory=dict)
    retry: RetryPolicy | None = None
    approval: ApprovalPolicy | None = None
    operation_version: int = Field(default=1, ge=1)
    description: str = ""
    # How long one call may run from its claim (default: the tool's timeout_s); a timed-out
    # compensation call is looked up by key and retried like any ambiguous outcome.
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # How long after compensation begins this undo must be done (default: the tool's
    # deadline_s); a miss is recorded and follows on_deadline (default escalate).
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    on_deadline: CompensationDeadlinePolicy | None = None

    @model_serializer(mode="wrap")
    def _omit_unset_conditions(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _omit_unset(handler(self), ("timeout_s", "deadline_s", "on_deadline"))


class StepDefinition(BaseModel):
    """One forward step: the allowlisted tool, its argument template, semantics and policies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_STEP_ID, max_length=64)
    tool: str = Field(min_length=1)
    version: int = Field(default=1, ge=1)
    semantics: Semantics
    args: JsonArgs = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    pivot: bool = False
    compensation: CompensationCommand | None = None
    retry: RetryPolicy | None = None
    approval: ApprovalPolicy | None = None
    operation_version: int = Field(default=1, ge=1)
    description: str = ""
    # Resolved like args (over the input and dependencies' receipts) and handed to the tool
    # with them, which raises PreconditionFailed when it does not hold: as compensations do.
    precondition: JsonArgs = Field(default_factory=dict)
    on_precondition_failed: DeadlinePolicy | None = None  # default: escalate
    # How long one forward call may run from its claim (default: the tool's timeout_s).
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    on_timeout: DeadlinePolicy | None = None  # default: retry (look up by key first)

    @model_serializer(mode="wrap")
    def _omit_unset_conditions(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _omit_unset(handler(self), (
            "precondition", "on_precondition_failed", "timeout_s", "on_timeout"))

    @property
    def leaves_effect(self) -> bool:
        """Whether a success changes the world in a way that needs undoing."""
        return self.semantics not in EFFECT_FREE_SEMANTICS


InputType = Literal["string", "integer", "number", "boolean", "object", "array"]

# The JSON Schema keywords an input field may carry besides the flat ones above them, dumped
# only when set: a definition written before they existed keeps its content hash.
_SCHEMA_KEYWORDS = ("pattern", "format", "properties", "items", "additional_properties")


class InputField(BaseModel):
    """One field of a saga's input, checked as the JSON Schema (Draft 2020-12) it compiles to
    (:meth:`json_schema`, :mod:`saga_core.definitions.input_schema`); ``secret`` values are never
    shown.

    An ``object`` field may declare its ``properties`` and an ``array`` field its ``items``,
    each an input field again (nested ``required`` defaults to true, as at the top); an
    object with declared properties refuses others unless ``additional_properties``.
    ``min_length``/``max_length`` bound a string's characters or an array's items; ``pattern``
    (a regular expression searched in the string) and ``format`` (``email``, ``date-time``,
    ``uri``, ... checked, never merely annotated) apply to strings. A nested ``default`` is
    an annotation only: defaults are filled in for top-level fields.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: InputType
    required: bool = True
    description: str = ""
    secret: bool = False
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    min_length: int | None = Field(default=None, ge=0)
    max_length: int | None = Field(default=None, ge=0)
    enum: list[Any] | None = None
    default: Any = None
    pattern: str | None = None
    format: str | None = None
    properties: dict[str, InputField] | None = None
    items: InputField | None = None
    additional_properties: bool | None = None

    @model_serializer(mode="wrap")
    def _omit_unset_schema_keywords(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in _SCHEMA_KEYWORDS:
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    def json_schema(self) -> dict[str, Any]:
        """This field as a JSON Schema (Draft 2020-12) property, nested fields included."""
        schema: dict[str, Any] = {"type": self.type}
        if self.description:
            schema["description"] = self.description
        # JSON Schema counts a string's characters with minLength, an array's items with
        # minItems; the definition says min_length for both.
        lengths = ("minItems", "maxItems") if self.type == "array" else ("minLength", "maxLength")
        for name, key in (
            ("minimum", "minimum"),
            ("maximum", "maximum"),
            ("exclusive_minimum", "exclusiveMinimum"),
            ("exclusive_maximum", "exclusiveMaximum"),
            ("min_length", lengths[0]),
            ("max_length", lengths[1]),
            ("enum", "enum"),
            ("pattern", "pattern"),
            ("format", "format"),
        ):
            value = getattr(self, name)
            if value is not None:
                schema[key] = value
        if self.properties is not None:
            schema["properties"] = {name: f.json_schema() for name, f in self.properties.items()}
            schema["required"] = [name for name, f in self.properties.items() if f.required]
            schema["additionalProperties"] = bool(self.additional_properties)
        elif self.additional_properties is not None:
            schema["additionalProperties"] = self.additional_properties
        if self.items is not None:
            schema["items"] = self.items.json_schema()
        if self.default is not None:
            schema["default"] = self.default
        if self.secret:
            schema["writeOnly"] = True
            schema["x-secret"] = True
        return schema


class SagaDefinition(BaseModel):
    """A named, versioned saga: input fields, dependent steps, budgets and tool contracts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_NAME, max_length=NAME_CHARS)
    version: int = Field(ge=1)
    description: str = ""
    # The business invariant in plain language: what must hold when the saga ends, however
    # it ends (shown in escalations' evidence, the operator queue and audit).
    invariant: str = ""
    input: dict[str, InputField] = Field(default_factory=dict)
    steps: list[StepDefinition]
    retry_budget: int = Field(default=10, ge=0)
    default_retry: RetryPolicy = DEFAULT_RETRY
    escalation_deadline_s: float = Field(default=86400.0, gt=0)
    # An approval asked this often without a usable answer goes to a human queue instead.
    max_approval_requests: int = Field(default=3, ge=1)
    # Stop conditions for the whole saga: a time limit and a cost budget
    # (saga_core.definitions.budgets).
    budget: SagaBudget | None = None
    # Snapshot of the tool contracts this definition was validated against (filled by
    # validate_definition), so recovery never needs the catalogue or the original process.
    tools: list[ToolSpec] = Field(default_factory=list)

    # -- serialization -------------------------------------------------------------------

    @model_serializer(mode="wrap")
    def _omit_no_budget(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A definition without a budget dumps as before budgets existed: its hash is kept.
        data: dict[str, Any] = handler(self)
        if self.budget is None:
            data.pop("budget", None)
        if not self.invariant:
            data.pop("invariant", None)
        return data

    def content_hash(self) -> str:
        """sha256 of the canonical JSON of the whole definition: its stable identity."""
        return self._content_hash

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> SagaDefinition:
        """A copy (pydantic's); with ``update``, one that derives its hash, step and tool
        tables and pivot from its own fields. Derived values live in the instance's
        ``__dict__`` beside the fields, which pydantic copies whole: an updated copy would
        otherwise answer with the original's (its content hash, its old steps)."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            for name in _DERIVED:
                copied.__dict__.pop(name, None)
        return copied

    @cached_property
    def _content_hash(self) -> str:
        # A definition is frozen, so its hash is computed once: folding checks it per saga.
        return payload_hash(self.model_dump(mode="json"))

    def to_json(self) -> str:
        """The definition as a JSON document."""
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False, indent=2)

    @classmethod
    def from_json(cls, text: str) -> SagaDefinition:
        """Load a definition from JSON text (size and nesting bounded, see saga_core.limits)."""
        return parse_definition(load_document(text, "definition", DEFINITION_BYTES, "json"))

    def to_yaml(self) -> str:
        """The definition as a YAML document (PyYAML, safe dumper)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_yaml(cls, text: str) -> SagaDefinition:
        """Load a definition from YAML (PyYAML's safe loader, aliases and size bounded)."""
        return parse_definition(load_document(text, "definition", DEFINITION_BYTES, "yaml"))

    def input_json_schema(self) -> dict[str, Any]:
        """JSON Schema of the input, so an agent's tool-calling can fill it."""
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"{self.name} v{self.version} input",
            "type": "object",
            "properties": {name: f.json_schema() for name, f in self.input.items()},
            "required": [name for name, f in self.input.items() if f.required],
            "additionalProperties": False,
        }

    # -- graph -----------------------------------------------------------------------------

    @cached_property
    def _by_id(self) -> dict[str, StepDefinition]:
        return {step.id: step for step in self.steps}

    @property
    def step_ids(self) -> list[str]:
        """Step ids in declaration order (the deterministic iteration order of decide)."""
        return [step.id for step in self.steps]

    def step(self, step_id: str) -> StepDefinition:
        """The step with this id; KeyError when there is none."""
        return self._by_id[step_id]

    def has_step(self, step_id: str) -> bool:
        """Whether a step with this id exists."""
        return step_id in self._by_id

    @cached_property
    def _ancestors(self) -> dict[str, frozenset[str]]:
        return {step.id: self._walk(step.id, self._deps) for step in self.steps}

    @cached_property
    def _descendants(self) -> dict[str, frozenset[str]]:
        return {step.id: self._walk(step.id, self._dependents) for step in self.steps}

    @cached_property
    def _deps(self) -> dict[str, list[str]]:
        return {s.id: [d for d in s.depends_on if d in self._by_id] for s in self.steps}

    @cached_property
    def _dependents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {s.id: [] for s in self.steps}
        for step in self.steps:
            for dep in self._deps[step.id]:
                out[dep].append(step.id)
        return out

    @staticmethod
    def _walk(start: str, edges: dict[str, list[str]]) -> frozenset[str]:
        seen: set[str] = set()
        stack = list(edges.get(start, []))
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(edges.get(node, []))
        seen.discard(start)
        return frozenset(seen)

    def ancestors(self, step_id: str) -> frozenset[str]:
        """Every step ``step_id`` transitively depends on."""
        return self._ancestors[step_id]

    def descendants(self, step_id: str) -> frozenset[str]:
        """Every step that transitively depends on ``step_id``."""
        return self._descendants[step_id]

    @cached_property
    def pivot(self) -> StepDefinition | None:
        """The pivot step (validation allows at most one), if any (found once: decide asks
        whether it is passed several times per call)."""
        return next((step for step in self.steps if step.pivot), None)

    # -- policies ----------------------------------------------------------------------------

    def retry_policy(self, step_id: str, kind: StepKind) -> RetryPolicy:
        """The retry policy in force for a step's forward or compensation operation."""
        step = self.step(step_id)
        if kind is StepKind.COMPENSATION and step.compensation is not None:
            return step.compensation.retry or step.retry or self.default_retry
        return step.retry or self.default_retry

    def approval_policy(self, step_id: str, kind: StepKind) -> ApprovalPolicy | None:
        """The approval policy for a step's forward or compensation operation, if any."""
        step = self.step(step_id)
        if kind is StepKind.COMPENSATION:
            return step.compensation.approval if step.compensation else None
        return step.approval

    def tool_for(self, step_id: str, kind: StepKind) -> tuple[str, int]:
        """(tool name, version) a step's forward or compensation operation calls."""
        step = self.step(step_id)
        if kind is StepKind.COMPENSATION:
            if step.compensation is None:
                raise KeyError(f"step {step_id!r} has no compensation")
            return step.compensation.tool, step.compensation.version
        return step.tool, step.version

    def step_timeout_s(self, step_id: str, kind: StepKind) -> float | None:
        """How long one call of a step's operation may run from its claim (the definition's
        timeout, else its tool's; None: only the fleet's lease bounds it)."""
        step = self.step(step_id)
        declared = step.timeout_s
        if kind is StepKind.COMPENSATION and step.compensation is not None:
            declared = step.compensation.timeout_s
        spec = self.tool_spec(step_id, kind)
        return declared if declared is not None else (spec.timeout_s if spec else None)

    def compensation_deadline_s(self, step_id: str) -> float | None:
        """How long after compensation begins a step's compensation must be done (the
        definition's deadline, else its compensation tool's; None: no deadline)."""
        compensation = self.step(step_id).compensation
        if compensation is None:
            return None
        if compensation.deadline_s is not None:
            return compensation.deadline_s
        spec = self.tool_spec(step_id, StepKind.COMPENSATION)
        return spec.deadline_s if spec else None

    def tool_spec(self, step_id: str, kind: StepKind) -> ToolSpec | None:
        """The snapshotted tool contract of a step's operation (None if not bound)."""
        try:
            return self._operation_specs[(step_id, kind)]
        except KeyError:  # no such operation: the reference path raises what it always did
            return self._bound_spec(step_id, kind)

    def call_cost(self, step_id: str, kind: StepKind) -> Decimal:
        """What one call of a step's operation costs: its tool's declared cost as an exact
        decimal (0 for a tool not bound)."""
        try:
            return self._operation_costs[(step_id, kind)]
        except KeyError:
            return self._declared_cost(step_id, kind)

    def _bound_spec(self, step_id: str, kind: StepKind) -> ToolSpec | None:
        # The reference path of tool_spec (its table is built from this, once).
        return self._specs.get(self.tool_for(step_id, kind))

    def _declared_cost(self, step_id: str, kind: StepKind) -> Decimal:
        # The reference path of call_cost (its table is built from this, once).
        spec = self._bound_spec(step_id, kind)
        return money(spec.cost) if spec is not None else Decimal(0)

    @property
    def _operations(self) -> list[tuple[str, StepKind]]:
        """Every operation the definition declares: each step's forward one and, where it
        has one, its compensation, in declaration order."""
        return [
            (step.id, kind)
            for step in self.steps
            for kind in (StepKind.FORWARD, StepKind.COMPENSATION)
            if kind is StepKind.FORWARD or step.compensation is not None
        ]

    # A definition is frozen, so what decide asks of an operation on every call (its tool's
    # contract, a call's cost: a budget sums them over every run, several times per commit)
    # is derived once per definition, from the reference paths above.

    @cached_property
    def _operation_specs(self) -> dict[tuple[str, StepKind], ToolSpec | None]:
        return {op: self._bound_spec(*op) for op in self._operations}

    @cached_property
    def _operation_costs(self) -> dict[tuple[str, StepKind], Decimal]:
        return {op: self._declared_cost(*op) for op in self._operations}

    @cached_property
    def _specs(self) -> dict[tuple[str, int], ToolSpec]:
        return {(t.name, t.version): t for t in self.tools}

    @cached_property
    def declares_conditions(self) -> bool:
        """Whether any timeout, compensation deadline or postcondition applies to this saga
        (the condition rules are skipped for one that declares none: most of them)."""
        for step in self.steps:
            compensation = step.compensation
            if step.timeout_s is not None or compensation is not None and (
                    compensation.timeout_s is not None or compensation.deadline_s is not None):
                return True
        return any(t.timeout_s is not None or t.deadline_s is not None
                   or t.postcondition is not None for t in self.tools)


_DERIVED: frozenset[str] = frozenset(
    name for name, member in vars(SagaDefinition).items() if isinstance(member, cached_property))
"""What a definition derives from its fields once (see :meth:`SagaDefinition.model_copy`)."""


def parse_definition(document: Any) -> SagaDefinition:
    """A definition from an untrusted document: its size checked first
    (:class:`~saga_core.limits.LimitExceeded`), then every malformed field listed at once
    (:class:`~saga_core.errors.DefinitionError`). Not yet validated against a catalogue."""
    check_definition_document(document)
    try:
        return SagaDefinition.model_validate(document)
    except ValidationError as exc:
        name = document.get("name") if isinstance(document, dict) else None
        shown = name if isinstance(name, str) and definition_name_problem(name) is None else "?"
        raise DefinitionError(shown, [
            Problem(err.path or "definition", "malformed", err.message)
            for err in field_errors(exc)
        ]) from None


def check_definition_document(document: Any, what: str = "definition") -> None:
    """Refuse a definition document over ``definition_bytes`` or ``definition_steps`` before
    any model is built from it (:class:`~saga_core.limits.LimitExceeded`)."""
    measure_json(what, document, DEFINITION_BYTES)
    steps = document.get("steps") if isinstance(document, dict) else None
    if isinstance(steps, list):
        DEFINITION_STEPS.check(f"{what} steps", len(steps))
    invariant = document.get("invariant") if isinstance(document, dict) else None
    if isinstance(invariant, str):
        INVARIANT_CHARS.check(f"{what} invariant", len(invariant))

"""The tool catalogue as data: what each allowlisted tool does, returns and how it is undone.

A :class:`ToolSpec` is the one owner of every fact about a tool: its semantics, arguments,
receipt fields, default compensation, whether its provider dedupes by key and its commit
horizon. Implementations carry none of these (``workers.tools.Tool`` is only ``execute`` and
``lookup``); a ``workers.tools.ToolSet`` binds each spec's ``(name, version)`` to one.
saga_core needs only these facts to validate definitions and plans and to choose between
retry, reconcile and escalate; a validated definition keeps a snapshot of the specs it was
checked against, so a saga decides by the contract it started under.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from saga_core.approval.risk_gates import RiskGate
from saga_core.contracts import Semantics
from saga_core.definitions.budgets import SagaBudget
from saga_core.definitions.conditions import Postcondition
from saga_core.definitions.documents import load_document
from saga_core.errors import UnknownToolError
from saga_core.limits import DEFINITION_BYTES

ArgType = Literal["string", "integer", "number", "boolean", "object", "array", "any"]


class ArgSpec(BaseModel):
    """One argument a tool accepts (JSON-Schema-ish: type, required, bounds, secret)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: ArgType = "any"
    required: bool = True
    minimum: float | None = None
    secret: bool = False
    description: str = ""


class DefaultCompensation(BaseModel):
    """The compensation an agent plan gets for this tool (plans never choose their own undo)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    version: int = Field(default=1, ge=1)
    args: dict[str, Any] = Field(default_factory=dict)
    precondition: dict[str, Any] = Field(default_factory=dict)


class ToolSpec(BaseModel):
    """An allowlisted tool at one version: semantics, receipt fields, dedupe and commit horizon."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    version: int = Field(default=1, ge=1)
    semantics: Semantics
    receipt_fields: list[str] = Field(default_factory=list)
    optional_receipt_fields: list[str] = Field(default_factory=list)
    # True when the provider dedupes by our operation key: a retry with the same key after a
    # confirmed absence cannot create a second effect.
    dedupes_by_key: bool = False
    # Seconds after which a dispatched request can no longer commit; None = unknown, so an
    # ambiguous outcome of a non-deduping tool can only be escalated.
    commit_horizon_s: float | None = Field(default=None, ge=0)
    args: dict[str, ArgSpec] = Field(default_factory=dict)
    compensation: DefaultCompensation | None = None
    # What one call costs (any unit the catalogue's budgets use): every started call is
    # charged to its saga's budget, see saga_core.definitions.budgets.
    cost: float = Field(default=0, ge=0, allow_inf_nan=False)
    description: str = ""
    # When a call needs a person (saga_core.approval.risk_gates); every saga calling the tool obeys
    # it.
    gate: RiskGate | None = None
    # What must be observed before a receipt of this tool advances a saga (None: the
    # receipt alone does), see saga_core.definitions.conditions.
    postcondition: Postcondition | None = None
    # Defaults a definition may override: how long one call may run from its claim before
    # it is treated as timed out, and (for a compensation tool) how long after compensation
    # begins the undo must be done.
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _gate_reads_known_arguments(self) -> ToolSpec:
        unknown = [a for a in (self.gate.arguments() if self.gate else []) if a not in self.args]
        if self.args and unknown:
            raise ValueError(f"gate of {self.name}@{self.version} reads unknown arguments "
                             f"{unknown}")
        conditions = self.postcondition.receipt if self.postcondition else []
        unreturned = [c.field for c in conditions if not self.returns(c.field)]
        if unreturned:
            raise ValueError(f"postcondition of {self.name}@{self.version} reads receipt "
                             f"fields it does not return: {unreturned}")
        return self

    @model_serializer(mode="wrap")
    def _omit_later_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A tool without a gate and without a cost dumps as it did before gates and costs
        # existed, so the content hash of a definition that snapshotted it (and of every saga
        # started on it) is unchanged.
        data = handler(self)
        if isinstance(data, dict):
            if data.get("gate") is None:
                data.pop("gate", None)
            if self.cost == 0:
                data.pop("cost", None)
            # Likewise for the conditions added later (postcondition, deadlines).
            for name in ("postcondition", "timeout_s", "deadline_s"):
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    def returns(self, field: str) -> bool:
        """Whether this tool's receipt carries ``field`` (top-level receipt fields included)."""
        return field in ("resource_id", "version", "status") or field in (
            *self.receipt_fields,
            *self.optional_receipt_fields,
        )


class ToolCatalogue(BaseModel):
    """The allowlist of tools, looked up by (name, version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools: list[ToolSpec] = Field(default_factory=list)
    # The budget every agent plan runs under (plans never choose their own): None, no limit.
    plan_budget: SagaBudget | None = None

    def get(self, name: str, version: int) -> ToolSpec | None:
        """The spec for (name, version), or None when it is not allowlisted."""
        return next((t for t in self.tools if t.name == name and t.version == version), None)

    def require(self, name: str, version: int) -> ToolSpec:
        """The spec for (name, version); :class:`UnknownToolError` when not allowlisted."""
        spec = self.get(name, version)
        if spec is None:
            raise UnknownToolError(name, version)
        return spec

    def refs(self) -> list[tuple[str, int]]:
        """Every allowlisted ``(name, version)``, sorted."""
        return sorted((t.name, t.version) for t in self.tools)

    def versions(self, name: str) -> list[int]:
        """Known versions of a tool name (for error messages)."""
        return sorted(t.version for t in self.tools if t.name == name)

    @classmethod
    def from_yaml(cls, text: str) -> ToolCatalogue:
        """Load a catalogue from YAML (the bounded loader: sized like a definition file)."""
        return cls.model_validate(load_document(text, "tool catalogue", DEFINITION_BYTES, "yaml"))

    def to_yaml(self) -> str:
        """The catalogue as YAML."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

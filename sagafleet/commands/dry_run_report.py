"""How ``start --dry-run`` and ``plan --dry-run`` report: the plan as text, or as one JSON
document (the :class:`~saga_core.engine.dry_run.DryRun` itself)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from saga_core.engine.dry_run import DryRun, PlannedOperation


@dataclass(frozen=True)
class DryRunReport:
    """What a start would do; nothing was written and no tool was called."""

    plan: DryRun

    def to_json(self) -> dict[str, Any]:
        """The dry run as JSON (``dry_run: true`` marks it apart from a start's report)."""
        return {"dry_run": True, **self.plan.model_dump(mode="json")}

    def to_text(self) -> str:
        """The graph in waves, each step's operations with key and arguments, the gates and
        the budget, then a line saying nothing was written."""
        p = self.plan
        saga = p.saga_id if p.saga_id_final else f"{p.saga_id} (example: no --key given, " \
            "so the real saga id and operation keys will differ)"
        lines = [f"dry run of {p.definition} v{p.version} (hash {p.definition_hash[:16]}…, "
                 f"tenant {p.tenant})", f"saga id: {saga}",
                 "order: " + " -> ".join("[" + ", ".join(wave) + "]" for wave in p.order)]
        for step in p.steps:
            after = f" after {', '.join(step.depends_on)}" if step.depends_on else ""
            pivot = " PIVOT" if step.pivot else ""
            lines.append(f"  {step.step_id} (wave {step.wave}{after}; {step.semantics}"
                         f"{pivot}; {step.undo})")
            lines += _operation_lines(step.forward)
            if step.compensation is not None:
                lines += _operation_lines(step.compensation)
        lines.append("gates that ask a person:" if p.gates else "gates: none will ask a person")
        lines += [f"  {line}" for line in p.gates]
        if p.budget is not None:
            b = p.budget
            limits = [f"time limit {b.time_limit_s:g} s" if b.time_limit_s else "",
                      f"max cost {b.max_cost:g}" if b.max_cost is not None else ""]
            within = "" if b.within_budget is None else (
                " (within budget)" if b.within_budget else " (OVER BUDGET)")
            lines.append(f"budget: {', '.join(x for x in limits if x)}; every step once costs "
                         f"{b.forward_cost}{within}, every compensation once "
                         f"{b.compensation_cost}; on exceeded: {b.on_exceeded}")
        lines.append("nothing was written and no tool was called")
        return "\n".join(lines)


def _operation_lines(op: PlannedOperation) -> list[str]:
    head = f"    {op.kind:<12} {op.tool}@{op.version}  key {op.operation_key}"
    lines = [head, f"      args {json.dumps(op.args, sort_keys=True, default=str)}"]
    if op.waits_for:
        later = {k: v for k, v in op.templates.items() if k not in op.args}
        lines.append(f"      after {', '.join(op.waits_for)}: "
                     f"{json.dumps(later, sort_keys=True, default=str)}")
    if op.gate is not None:
        g = op.gate
        ask = {None: "decided when it runs", True: "WILL ASK", False: "will not ask"}[g.will_ask]
        lines.append(f"      gate: {ask}; if {g.condition}; role {g.role}"
                     f"{', four eyes' if g.four_eyes else ''}")
    return lines

"""What the largest accepted input of each entry costs, and what the alias bomb of issue 20
costs before and after: peak traced memory (tracemalloc) against the input's size.

Each case runs in its own subprocess (so one case's peak is not another's), the "before"
case under an address-space cap so it dies with MemoryError instead of taking the machine.

    .venv/bin/python scripts/bench_limits.py            # a table
    .venv/bin/python scripts/bench_limits.py --json     # one JSON document
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BEFORE_CAP = 1536 * 1024 * 1024


def _alias_bomb(levels: int, width: int = 9) -> str:
    lines = ["name: bomb", "version: 1", "a0: &a0 [" + ",".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]"
              for i in range(1, levels)]
    lines.append(f"steps: [{{id: s, tool: lookup, semantics: read_only, "
                 f"args: {{v: *a{levels - 1}}}}}]")
    return "\n".join(lines) + "\n"


def _catalogue() -> Any:
    from saga_core.contracts import Semantics
    from saga_core.definitions.catalogue import ToolCatalogue, ToolSpec
    from sagafleet.example_sagas import trip_tool_catalogue

    return ToolCatalogue(tools=[*trip_tool_catalogue().tools,
                                ToolSpec(name="lookup", semantics=Semantics.READ_ONLY)])


def _pad(text_of: Any, limit: int) -> str:
    """The text ``text_of(n)`` makes, with n chosen so it is ``limit`` bytes (or just under)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if len(text_of(mid).encode()) <= limit:
            low = mid
        else:
            high = mid - 1
    return str(text_of(low))


def case_input(name: str) -> tuple[int, Any]:
    """(input size in bytes, a function running the entry on it) for one case."""
    from saga_core import validate_definition, validate_plan
    from saga_core.agents.plans import parse_plan
    from saga_core.definitions.definition import InputField, parse_definition
    from saga_core.definitions.documents import load_document
    from saga_core.definitions.inputs import validate_input
    from saga_core.limits import (
        DEFINITION_BYTES,
        DEFINITION_STEPS,
        INPUT_TEXT_BYTES,
        PLAN_ACTIONS,
        PLAN_BYTES,
        SAGA_INPUT_BYTES,
        check_command_message,
    )
    from sagafleet.example_sagas import trip_definition

    catalogue = _catalogue()

    def register(text: str, syntax: str = "yaml") -> Any:
        return lambda: validate_definition(parse_definition(
            load_document(text, "definition", DEFINITION_BYTES, syntax)), catalogue)  # type: ignore[arg-type]

    if name == "definition: largest (200 steps, padded to definition_bytes)":
        steps = [{"id": f"s{i}", "tool": "lookup", "semantics": "read_only",
                  "depends_on": [f"s{j}" for j in range(max(0, i - 10), i)]}
                 for i in range(DEFINITION_STEPS.value)]
        text = _pad(lambda n: json.dumps({"name": "big", "version": 1, "description": "d" * n,
                                          "steps": steps}), DEFINITION_BYTES.value)
        return len(text), register(text)
    if name.startswith("definition: alias bomb"):
        text = _alias_bomb(9 if "9" in name else 8)
        return len(text), register(text)
    if name == "plan: largest (100 actions, padded to plan_bytes)":
        actions = [{"tool": "lookup", "args": {"n": i}} for i in range(PLAN_ACTIONS.value)]
        text = _pad(lambda n: json.dumps({"goal": "g" * n, "actions": actions}),
                    PLAN_BYTES.value)
        return len(text), lambda: validate_plan(parse_plan(
            load_document(text, "plan", PLAN_BYTES, "json")), catalogue)
    if name == "start: largest saga input (saga_input_bytes)":
        trip = trip_definition()
        spec = trip.model_copy(update={"input": {**trip.input, "notes": InputField(
            type="array", required=False)}})
        base = {"customer_email": "ada@example.com", "flight_id": "F1", "hotel_id": "H1",
                "nights": 2, "amount": 100, "currency": "EUR", "card_token": "tok"}
        text = _pad(lambda n: json.dumps({**base, "notes": [{"k": i} for i in range(n)]},
                                         separators=(",", ":")), SAGA_INPUT_BYTES.value)
        return len(text), lambda: validate_input(spec, load_document(
            text, "--input", INPUT_TEXT_BYTES, "json"))
    if name == "start: largest saga input, every item schema-checked (format, pattern)":
        trip = trip_definition()
        item = InputField(type="object", properties={
            "email": InputField(type="string", format="email"),
            "code": InputField(type="string", pattern="^[A-Z]{2}[0-9]+$")})
        spec = trip.model_copy(update={"input": {**trip.input, "notes": InputField(
            type="array", required=False, items=item)}})
        base = {"customer_email": "ada@example.com", "flight_id": "F1", "hotel_id": "H1",
                "nights": 2, "amount": 100, "currency": "EUR", "card_token": "tok"}
        text = _pad(lambda n: json.dumps(
            {**base, "notes": [{"email": "a@example.com", "code": f"AB{i}"} for i in range(n)]},
            separators=(",", ":")), SAGA_INPUT_BYTES.value)
        return len(text), lambda: validate_input(spec, load_document(
            text, "--input", INPUT_TEXT_BYTES, "json"))
    if name == "command message: largest (command_message_bytes)":
        from saga_core.limits import COMMAND_MESSAGE_BYTES

        text = _pad(lambda n: json.dumps([[], {"reason": "r" * n}], separators=(",", ":")),
                    COMMAND_MESSAGE_BYTES.value)
        return len(text), lambda: check_command_message(*json.loads(text))
    raise ValueError(f"no case {name!r}")  # unreachable: argparse checked --case's choices


CASES = (
    "definition: largest (200 steps, padded to definition_bytes)",
    "definition: alias bomb of issue 20, 8 levels",
    "definition: alias bomb of issue 20, 9 levels",
    "plan: largest (100 actions, padded to plan_bytes)",
    "start: largest saga input (saga_input_bytes)",
    "start: largest saga input, every item schema-checked (format, pattern)",
    "command message: largest (command_message_bytes)",
)


def _before(levels: int) -> tuple[int, Any]:
    """The register path before issue 20: PyYAML's plain safe loader, then validation."""
    import yaml

    from saga_core import validate_definition
    from saga_core.definitions.definition import SagaDefinition

    text = _alias_bomb(levels)
    catalogue = _catalogue()

    def run() -> None:
        document = yaml.safe_load(text)
        validate_definition(SagaDefinition.model_validate(document), catalogue)
    return len(text), run


def measure(name: str, before: bool) -> dict[str, Any]:
    """Run one case in this process and report its peak memory and outcome."""
    if before:
        resource.setrlimit(resource.RLIMIT_AS, (BEFORE_CAP, BEFORE_CAP))
        size, run = _before(9 if "9" in name else 8)
    else:
        size, run = case_input(name)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        run()
        outcome = "accepted"
    except MemoryError:
        outcome = f"MemoryError (address space capped at {BEFORE_CAP >> 20} MiB)"
    except Exception as exc:  # noqa: BLE001 - the outcome is what is measured
        outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:110]}"
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"case": name, "code": "before" if before else "after", "input_bytes": size,
            "peak_traced_bytes": peak, "peak_over_input": round(peak / size, 1),
            "max_rss_mib": round(rss_kib / 1024, 1), "seconds": round(elapsed, 2),
            "outcome": outcome}


def main() -> None:
    """Run every case in a subprocess and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--before", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args.before)))
        return
    runs = [(case, False) for case in CASES]
    runs += [(case, True) for case in CASES if "alias bomb" in case]
    results = []
    for case, before in runs:
        command = [sys.executable, __file__, "--case", case] + (["--before"] if before else [])
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            results.append({"case": case, "code": "before" if before else "after",
                            "outcome": f"process died: {done.stderr.strip()[-200:]}"})
            continue
        results.append(json.loads(done.stdout))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'case':<62} {'code':<6} {'input':>9} {'peak':>12} {'x':>7} {'rss MiB':>8} "
          f"{'s':>6}  outcome")
    for r in results:
        if "peak_traced_bytes" not in r:
            print(f"{r['case']:<62} {r['code']:<6} {r['outcome']}")
            continue
        print(f"{r['case']:<62} {r['code']:<6} {r['input_bytes']:>9} "
              f"{r['peak_traced_bytes']:>12} {r['peak_over_input']:>7} {r['max_rss_mib']:>8} "
              f"{r['seconds']:>6}  {r['outcome']}")


if __name__ == "__main__":
    main()

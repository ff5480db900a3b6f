"""The human-readable tables of a chaos report (``--json`` prints the report itself)."""

from __future__ import annotations

from typing import Any


def _counts(title: str, counts: dict[str, Any]) -> list[str]:
    lines = [title]
    lines += [f"  {name:<28} {value:>6}" for name, value in counts.items()] or ["  (none)"]
    return lines


def _manual_reasons(groups: list[dict[str, Any]]) -> list[str]:
    """Why the sagas in MANUAL_INTERVENTION wait for a person: one row per reason and step."""
    lines = [f"MANUAL_INTERVENTION reasons ({sum(g['count'] for g in groups)} sagas):"]
    if not groups:
        return [*lines, "  (none)"]
    lines.append(f"  {'count':>5}  {'step':<28} {'tenants':<22} reason")
    for g in groups:
        tenants = ", ".join(f"{t} {n}" for t, n in g["tenants"].items())
        lines.append(f"  {g['count']:>5}  {g['step']:<28} {tenants:<22} {g['reason']}")
        if g["example"] != g["reason"]:
            lines.append(f"  {'':>5}  e.g. {g['example'][:160]}")
    return lines


def render(report: dict[str, Any]) -> str:
    """Faults, sagas, commands, checks and violations, one table each."""
    p, sagas, cmds = report["parameters"], report["sagas"], report["commands"]
    lines = [f"chaos run: {p['sagas']} sagas, {p['workers']} workers, {p['duration_s']:.0f}s "
             f"of chaos, seed {report['seed']}, {report['durations_s']['total']:.0f}s in all",
             "", f"{'at':>7}  {'fault':<17} {'target':<22} result",
             f"{'-' * 7}  {'-' * 17} {'-' * 22} {'-' * 30}"]
    for event in report["faults"]["events"]:
        lines.append(f"{event['at_s']:>6.1f}s  {event['fault']:<17} {event['target']:<22} "
                     f"{event['result']}")
    lines += ["", *_counts("faults injected:", report["faults"]["counts"])]
    lines += ["", *_counts("provider faults injected:", report["provider_faults"] or {})]
    lines += ["", f"sagas started: {sagas['started']} ({sagas['started_directly']} directly, "
                  f"{sagas['started_by_agent']} by agent commands)",
              *_counts("settled:", sagas["settled"]),
              f"unsettled: {sagas['unsettled']['count']}"]
    lines += ["", *_manual_reasons(sagas.get("manual_intervention_reasons", []))]
    operator = report.get("operator", {})
    lines += ["", "operator: answered " + (", ".join(
        f"{k} {n}" for k, n in operator.get("answered", {}).items()) or "none")
              + "; refused " + (", ".join(
                  f"{k} {n}" for k, n in operator.get("refused", {}).items()) or "none")]
    outcomes = {f"{o} ({', '.join(f'{k} {n}' for k, n in by_kind.items())})": sum(
        by_kind.values()) for o, by_kind in cmds["outcomes"].items()}
    lines += ["", f"agent commands: sent {sum(cmds['sent'].values())}, accepted "
                  f"{sum(cmds['accepted'].values())}, unpublished {cmds['unpublished']}, "
                  f"never sent {cmds['never_sent']}, "
                  f"publish retries {cmds['publish_retries']}, sent while down "
                  f"{cmds['sent_while_down'] or 'none'}",
              *_counts("command outcomes:", outcomes),
              *_counts("dead-letter reasons:", cmds["dead_lettered"]["reasons"])]
    verify = report["verify"]
    lines += ["", f"duplicate effects: {report['duplicate_effects']['count']}",
              f"invariant violations: {len(report['invariant_violations'])}",
              f"lost commands: {cmds['lost']['count']}; lost with the broker's state: "
              f"{cmds['lost_with_broker_state']['count']}; pending in the broker: "
              f"{cmds['pending_in_broker']}",
              "resent after a broker restart (protocol {protocol}): {messages} messages for "
              "{commands} commands, after {restarts_seen_by_agent} restarts seen; "
              "{acted_after_resend} of them had gone with Redis and acted when resent".format(
                  **{**cmds["resent_after_broker_restart"],
                     "commands": sum(cmds["resent_after_broker_restart"]["commands"].values())}),
              "sagafleet verify: " + ("clean" if verify["clean"] else
                                      f"NOT CLEAN ({verify['differences']} differences)"),
              f"processes: {report['processes']['spawned']} spawned, "
              f"{report['processes']['killed']} killed, "
              f"{len(report['processes']['died_unexpectedly'])} died unexpectedly",
              "durations: " + ", ".join(f"{k} {v}s" for k, v in report["durations_s"].items()),
              "script's own cost: " + (", ".join(
                  f"{k} {v}s" for k, v in report["script_cost_s"].items()) or "none")]
    if report["violations"]:
        lines += ["", f"VIOLATIONS ({len(report['violations'])}):"]
        lines += [f"  - {v}" for v in report["violations"][:100]]
    else:
        lines += ["", "no violations"]
    return "\n".join(lines)

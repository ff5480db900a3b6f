"""The human-readable summary of a failover report (``--json`` prints the report itself)."""

from __future__ import annotations

from typing import Any


def render(report: dict[str, Any]) -> str:
    """The failovers, then the figures the run is judged on, then any violation."""
    p, sagas, events = report["parameters"], report["sagas"], report["events"]
    commands, direct = report["commands"], report["direct_starts"]
    lines = [f"failover run ({report['replication']} replication): {p['sagas']} sagas, "
             f"{p['workers']} workers, {p['duration_s']:.0f}s, seed {report['seed']}, "
             f"{report['durations_s']['total']:.0f}s in all", ""]
    for failover in report["failovers"]:
        if failover["server"] == "postgresql":
            lines.append(f"{failover['at_s']:>6.1f}s  PostgreSQL primary SIGKILLed "
                         f"({failover['killed_processes']} processes), standby promoted in "
                         f"{failover['promote_s']}s")
        else:
            lines.append(f"{failover['at_s']:>6.1f}s  Redis master SIGKILLed, Sentinel "
                         f"promoted the replica after {failover['promoted_after_s']}s")
    lines += [f"        the fleet wrote to the new primary "
              f"{report['database_writes_again_after_s']}s after the kill", ""]
    settled = ", ".join(f"{state} {n}" for state, n in sagas["settled"].items())
    lines += [
        f"sagas started:                    {sagas['started']} ({sagas['started_directly']} "
        f"directly, {sagas['started_by_agent']} by agent commands)",
        f"sagas settled:                    {sum(sagas['settled'].values())} ({settled})",
        f"sagas unsettled:                  {sagas['unsettled']['count']}",
        f"duplicate net effects:            {report['duplicate_effects']['count']}",
        f"invariant violations:             {len(report['invariant_violations'])}",
        f"agent commands lost:              {commands['lost']['count']} (of "
        f"{sum(commands['accepted'].values())} accepted; {commands['resent']['messages']} "
        f"resent, {commands['pending_in_broker']} pending in Redis)",
        f"events acknowledged, then missing: {events['missing_after_failover']} (of "
        f"{events['acknowledged_before_failover']} the witness saw"
        + (f"; {events['missing_by_type']}" if events["missing_by_type"] else "") + ")",
        f"acknowledged starts started again: "
        f"{direct['missing_after_failover_started_again']} (of {direct['acknowledged']})",
        "sagafleet verify:                 " + (
            "clean" if report["verify"]["clean"]
            else f"NOT CLEAN ({report['verify']['differences']} differences, exit"
                 f" {report['verify']['exit_code']})")
        + (f"; checkpoints lost with the tail: {lost}"
           if (lost := report["verify"].get("checkpoints_lost_in_promotion")) else ""),
        f"written to the fleet's database:  {report['log']['events']} events "
        f"({report['log']['events_per_saga']} a saga), {report['log']['wal_bytes']} bytes of "
        f"WAL ({report['log']['wal_bytes_per_saga']} a saga)" if report.get("log") else
        "written to the fleet's database:  (not read)",
        "durations: " + ", ".join(f"{k} {v}s" for k, v in report["durations_s"].items()),
    ]
    if report["violations"]:
        lines += ["", f"VIOLATIONS ({len(report['violations'])}):"]
        lines += [f"  - {v}" for v in report["violations"][:100]]
    else:
        lines += ["", "no violations"]
    return "\n".join(lines)

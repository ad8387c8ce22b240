"""What must hold after every fault (issue 16, item 4), checked from the cluster's own records.

- no job lost: every run ended in success, or in a failure whose task log names its cause;
- never two groups of one job alive at once (the simulated cloud's launch record). A move is
  make-before-break (jobs/drive.py): the old group is terminated right after the new one is
  launched, while the new one is still in its cold start, so no two workloads of a job ever run
  at once; an overlap longer than the cold start is a violation (e.g. a group launched twice);
- no instance left running once the runs have ended;
- every feasible deadline met (the fleet's deadlines are all feasible: T ≥ P + d);
- the bill adds up: a job summary's spot + on-demand cost is the sum of its launches' costs;
- no market row lost or duplicated: the seeded history is all there, and no key appears twice.

`check()` returns the problems found (empty: all hold) and per-run outcomes for the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cluster import FLEET_DAG, Cluster

BILL_TOLERANCE_USD = 0.02  # the summary rounds each figure to cents
# The task log is JSON lines; a failure's exception is in its error_detail.
_CAUSE = re.compile(r'"exc_type":\s*"(\w+)",\s*"exc_value":\s*"((?:[^"\\]|\\.)*)"')
DEADLINE_MISSED = "SkyNomadDeadlineMissed"


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    completed: int = 0
    started: int = 0
    outcomes: dict[str, str] = field(default_factory=dict)
    max_handover_hours: float = 0.0  # the longest make-before-break overlap of two groups of a job

    @property
    def ok(self) -> bool:
        return not self.problems


def check(cluster: Cluster, states: dict[str, str], cold_start_hours: float) -> Report:
    report = Report(started=len(states))
    summaries = cluster.summaries()
    cloud = cluster.cloud()
    groups = cloud.groups()
    run_of_job = {g["job_id"]: g["tags"].get("skynomad-run") for g in groups if g.get("job_id")}
    launches: dict[str, list[dict]] = {}
    for launch in cloud.launches():
        if run_of_job.get(launch["job_id"]) in states:
            launches.setdefault(launch["job_id"], []).append(launch)

    for run_id, state in states.items():
        summary = summaries.get(run_id)
        if state == "success":
            report.completed += 1
            report.outcomes[run_id] = "success"
            if summary is None:
                report.problems.append(f"{run_id}: success without a job summary")
            elif not summary["deadline_met"]:
                report.problems.append(f"{run_id}: feasible deadline missed: {summary['elapsed_hours']} h")
            continue
        causes = _CAUSE.findall(cluster.task_log(FLEET_DAG, run_id))
        cause = f"{causes[-1][0]}: {causes[-1][1][:200]}" if causes else "NO CAUSE IN ITS LOG"
        report.outcomes[run_id] = f"{state}: {cause}"
        if state != "failed" or not causes or causes[-1][0] == DEADLINE_MISSED:
            report.problems.append(f"{run_id}: {report.outcomes[run_id]}")

    for job_id, job_launches in launches.items():
        ordered = sorted(job_launches, key=lambda launch: launch["start_hours"])
        for before, after in zip(ordered, ordered[1:], strict=False):
            end = before["end_hours"]
            overlap = (end if end is not None else float("inf")) - after["start_hours"]
            report.max_handover_hours = max(report.max_handover_hours, overlap)
            if overlap >= cold_start_hours:
                report.problems.append(
                    f"job {job_id}: groups {before['group_id']} ({before['start_hours']:.3f}-{end} h) and "
                    f"{after['group_id']} (from {after['start_hours']:.3f} h) alive at once"
                )
        alive = [launch["group_id"] for launch in ordered if launch["end_hours"] is None]
        if alive:
            report.problems.append(f"job {job_id}: groups {alive} still running after its run ended")

    for run_id, summary in summaries.items():
        if run_id not in states or summary.get("cost_basis") != "cloud_bill":
            continue
        billed = sum(launch["cost_usd"] for launch in launches.get(summary["job_id"], []))
        reported = summary["cost_usd"]["spot"] + summary["cost_usd"]["on_demand"]
        if abs(billed - reported) > BILL_TOLERANCE_USD:
            report.problems.append(f"{run_id}: summary says ${reported:.2f} of instances, its launches ${billed:.2f}")

    report.problems += market_problems(cluster)
    return report


def market_problems(cluster: Cluster) -> list[str]:
    """The seeded history is intact and no observation key appears twice."""
    problems = []
    ((total, distinct),) = cluster.sql(
        "SELECT count(*), count(DISTINCT (zone, instance_type, observed_at)) FROM market_observations",
        dbname="market",
    )
    if total != distinct:
        problems.append(f"market table: {total - distinct} duplicated observations")
    ((seeded,),) = cluster.sql(
        "SELECT count(*) FROM market_observations WHERE observed_at < %s", (cluster.seeded_until,), dbname="market"
    )
    if seeded != cluster.seeded_rows:
        problems.append(f"market table: {cluster.seeded_rows} seeded rows written, {seeded} there now")
    return problems

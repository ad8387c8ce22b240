"""A finished SkyNomad job's result: the small XCom summary and the readable timeline for the task log.

The cost is one figure with its basis named in ``cost_basis``:

- ``"cloud_bill"``: the cloud's own bill for the job's tagged groups, probes and checkpoint
  copies (the simulated cloud bills from its trace, following price changes, up to each group's
  real end);
- ``"estimate"``: for a cloud that cannot bill (EC2 and Compute Engine here: their bills arrive
  later, elsewhere), the market prices the operator saw at each launch times the stretches it
  recorded.

``all_on_demand_cost_usd`` is the comparison: the cheapest on-demand price at the start for the
whole work plus one cold start, the work being what the checkpoints measured (`all_on_demand_usd`:
the one figure the log, the job page and this summary show, while the job runs and at its end).
"""

from __future__ import annotations

import math

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.jobs.record import JOB_TAG, JobRecord
from airflow_provider_skynomad.planner.timeline import NoteKind

CLOUD_BILL = "cloud_bill"
ESTIMATE = "estimate"
# Within this share of the declared work the measured work is "about as declared": half of the 10 % a
# running job's pace must move before it is said again (`jobs.learn.PACE_NEWS`), as the log says it.
ABOUT_AS_DECLARED = 0.05


def job_bill(cloud: Cloud, job_id: str, log) -> dict | None:
    """The cloud's own bill for this job (``bill(tags=...)``), or None when the cloud cannot bill."""
    try:
        return cloud.bill(tags={JOB_TAG: job_id})
    except Exception as exc:  # noqa: BLE001 - a finished job must not fail on its report
        log.warning("could not read the cloud's bill for job %s (%s); reporting the estimate instead", job_id, exc)
        return None


def all_on_demand_usd(record: JobRecord) -> float:
    """What the whole job would cost on the cheapest on-demand price at its start: the work the
    checkpoints measured (their point estimate, `planner.pace`; the declared work until they measure
    one) plus one declared cold start. The planner plans with a higher bound; the comparison is with
    the work as measured, the basis every figure of the job is said on, live and final."""
    pace = record.pace
    if pace is None or not pace.measured or not record.on_demand_usd_per_hour:
        return record.all_on_demand_usd
    extra_hours = pace.work_hours_estimate - pace.declared_work_hours
    return max(0.0, record.all_on_demand_usd + record.on_demand_usd_per_hour * extra_hours)


def summarize(record: JobRecord, elapsed_hours: float, cloud_bill: dict | None = None) -> dict:
    """The small XCom result: timeline by zone, hours by mode, cost breakdown, deadline met.

    :param cloud_bill: the cloud's bill for this job (`job_bill`); None to estimate from market prices.
    """
    zones = []
    for seg in record.segments:
        end = seg.end_hours if seg.end_hours is not None else elapsed_hours
        zones.append(
            {
                "zone": seg.zone,
                "mode": seg.mode,
                "start_hours": round(seg.start_hours, 3),
                "end_hours": round(end, 3),
                "end": seg.end.value if seg.end is not None else "running",
            }
        )
    if cloud_bill is None:
        basis, hours, usd = ESTIMATE, *_estimate(record, elapsed_hours)
    else:
        basis = CLOUD_BILL
        hours = {"spot": cloud_bill["spot_hours"], "on_demand": cloud_bill["on_demand_hours"]}
        usd = {key: cloud_bill[f"{key}_usd"] for key in ("spot", "on_demand", "egress", "probe")}
    return {
        "job_id": record.job_id,
        "policy": record.policy,
        "zones_timeline": zones,
        "spot_hours": round(hours["spot"], 3),
        "on_demand_hours": round(hours["on_demand"], 3),
        "cost_basis": basis,
        "cost_usd": {**{key: round(value, 2) for key, value in usd.items()}, "total": round(sum(usd.values()), 2)},
        "all_on_demand_cost_usd": round(all_on_demand_usd(record), 2),
        "migrations": record.migrations,
        "deferrals": record.seq,
        "preemptions": record.preemptions,
        "failed_launches": record.failed_launches,
        "elapsed_hours": round(elapsed_hours, 3),
        "deadline_hours": round(record.deadline_hours, 3),
        **({"dag_deadline_hours": round(record.dag_deadline_hours, 3)} if record.dag_deadline_hours else {}),
        "work_hours": record.pace.declared_work_hours if record.pace else record.job.work_hours,
        **({"measured_work_hours": round(record.pace.work_hours_estimate, 3)} if _measured(record) else {}),
        "deadline_met": bool(record.finished and elapsed_hours <= record.deadline_hours + 1e-9),
        "reaction_hours": round(record.job.reaction_hours, 4),  # the event → worker lag the job planned with
        "lag_hours_max": round(max(record.lags_hours, default=0.0), 4),  # slowest event → worker lag measured
        "lag_hours_p50": _quantile(record.lags_hours, 0.5),
        "lag_hours_p99": _quantile(record.lags_hours, 0.99),
    }


def _measured(record: JobRecord) -> bool:
    return record.pace is not None and record.pace.measured


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile of the measured lags (nearest rank), 0 when none was measured."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1], 4)


def _estimate(record: JobRecord, elapsed_hours: float) -> tuple[dict, dict]:
    """(hours, usd) by mode from the recorded stretches at their launch-time prices, plus estimated egress
    and probes."""
    hours = {"spot": 0.0, "on_demand": 0.0}
    usd = {"spot": 0.0, "on_demand": 0.0, "egress": record.egress_usd, "probe": record.probe_usd}
    for seg in record.segments:
        end = seg.end_hours if seg.end_hours is not None else elapsed_hours
        stretch = max(0.0, end - seg.start_hours)
        mode = "spot" if seg.mode == "spot" else "on_demand"
        hours[mode] += stretch
        usd[mode] += stretch * seg.usd_per_hour
    return hours, usd


def hours_line(summary: dict) -> str:
    """``spot S h, on-demand O h`` and whose hours they are: billed group-hours or recorded stretches."""
    whose = "billed" if summary.get("cost_basis") == CLOUD_BILL else "recorded"
    return f"spot {summary['spot_hours']:.2f} h, on-demand {summary['on_demand_hours']:.2f} h {whose}"


def cost_line(summary: dict) -> str:
    """``cost $T from the cloud's bill for this job (spot $S, ...)``, or the estimate, labelled as one."""
    cost = summary["cost_usd"]
    parts = (
        f"(spot ${cost['spot']:.2f}, on-demand ${cost['on_demand']:.2f}, egress ${cost['egress']:.2f}, "
        f"probes ${cost['probe']:.2f})"
    )
    if summary.get("cost_basis") == CLOUD_BILL:
        return f"cost ${cost['total']:.2f} from the cloud's bill for this job {parts}"
    return f"estimated cost ${cost['total']:.2f} at launch-time market prices {parts}; this cloud reports no bill"


def format_timeline(record: JobRecord, summary: dict) -> str:
    """A readable account for the task log."""
    lines = [f"SkyNomad job {record.job_id} ({record.policy}): timeline in cloud hours since start"]
    for item in record.timeline:
        # A decision's reason holds the planner's numbers (V, U): those go to DEBUG when decided.
        hidden = ("at_hours", "event", "ends_segment")
        if item["event"] == NoteKind.DECIDE:
            hidden += ("reason", "options")
        details = " ".join(f"{k}={v}" for k, v in item.items() if k not in hidden)
        lines.append(f"  t={item['at_hours']:7.2f} h  {item['event']:<18} {details}")
    lines.append(
        f"  {hours_line(summary)}, {summary['migrations']} migration(s), {summary['preemptions']} preemption(s)"
    )
    work = work_line(summary)
    if work:
        lines.append(f"  {work}")
    lines.append(f"  {cost_line(summary)}; all on-demand would be ${summary['all_on_demand_cost_usd']:.2f}")
    if summary.get("probing_usd"):
        lines.append(
            f"  the probe DAG spent ${summary['probing_usd']:.2f} probing the markets this job considered while it ran"
        )
    lines.append(f"  {deadline_line(summary)}")
    return "\n".join(lines)


def work_line(summary: dict) -> str | None:
    """``work measured M h, declared D h (P % slower than declared)``: the job's last measure of its
    real work, the figure the job page reports progress on. The pace said while the job ran is said
    again only once it moves 10 %, so without this line the log's last pace could be an early one the
    later checkpoints left behind (e.g. 17 % slower said at 18 % done, 23 % measured by the end). None
    when no pace was measured; "about as declared" within 5 %, as a running job's log says it."""
    measured, declared = summary.get("measured_work_hours"), summary.get("work_hours")
    if measured is None or not declared:
        return None
    ratio = measured / declared
    if abs(ratio - 1.0) < ABOUT_AS_DECLARED:
        how = "about as declared"
    elif ratio > 1.0:
        how = f"{100 * (ratio - 1.0):.0f} % slower than declared"
    else:
        how = f"{100 * (1.0 - ratio):.0f} % faster than declared"
    return f"work measured {measured:.2f} h, declared {declared:.2f} h ({how})"


def deadline_line(summary: dict) -> str:
    """``finished at E h of D h: deadline met`` (or MISSED), naming the DAG's deadline when a reserve was taken."""
    verdict = "met" if summary["deadline_met"] else "MISSED"
    line = f"finished at {summary['elapsed_hours']:.2f} h of {summary['deadline_hours']:.2f} h: deadline {verdict}"
    if summary.get("dag_deadline_hours"):
        line += f" (the DAG's deadline is {summary['dag_deadline_hours']:.2f} h; the rest is kept for downstream tasks)"
    return line

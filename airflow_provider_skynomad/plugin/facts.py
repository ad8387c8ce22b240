"""The figures a job page and the dashboard show, derived from a job record and its live status (plain dicts).

Pure: no Airflow, no I/O. Hours are cloud hours since the job started, as in the record.
Progress over time is rebuilt from the record's segments (a segment makes progress after its cold
start until it ends; a preemption loses what came after the last checkpoint, so the curve is an
upper bound between checkpoints); the checkpointed progress the record holds is shown beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..jobs.narrate import say


@dataclass
class Bar:
    """One stretch of the Gantt: a zone's lane from `start` to `end`, of one kind."""

    zone: str
    kind: str  # spot | on-demand | cold start | idle
    start: float
    end: float
    usd_per_hour: float = 0.0
    ended: str | None = None  # preempted | migrated | released | finished | failed | None (still running)


@dataclass
class JobFacts:
    job_id: str
    policy: str
    finished: bool
    elapsed_hours: float
    work_hours: float
    deadline_hours: float
    dag_deadline_hours: float | None
    cold_start_hours: float
    progress_hours: float
    zones: list[str]
    bars: list[Bar]
    markers: list[dict]  # {at, zone, kind: preempted|migrated, why}
    cost_points: list[tuple[float, float]]  # (hours, cumulative USD)
    on_demand_points: list[tuple[float, float]]
    progress_points: list[tuple[float, float]]
    spend_usd: float
    all_on_demand_usd: float
    cost_basis: str  # cloud_bill | estimate | so far
    slack_hours: float | None
    deadline_met: bool | None
    preemptions: int
    migrations: int
    decisions: list[dict] = field(default_factory=list)
    story: list[str] = field(default_factory=list)

    @property
    def saving_usd(self) -> float:
        return self.all_on_demand_usd - self.spend_usd

    @property
    def latest_safe_switch_hours(self) -> float:
        """The last moment on-demand (one cold start, then the rest of the work) still meets the deadline."""
        remaining = max(0.0, self.work_hours - self.progress_hours)
        return self.deadline_hours - remaining - self.cold_start_hours


def job_facts(record: dict, status: dict | None = None) -> JobFacts:
    """Everything the pages show about one job, from its record (and live status while it runs)."""
    job = record.get("job") or {}
    state = record.get("state") or {}
    summary = record.get("summary") or None
    segments = record.get("segments") or []
    finished = bool(record.get("finished"))
    elapsed = _elapsed(record, status, summary)
    bars = _bars(segments, elapsed)
    cost_points = _cost_curve(segments, elapsed)
    spend = cost_points[-1][1] if cost_points else 0.0
    basis = "so far (launch-time prices)"
    extras = float(record.get("egress_usd") or 0.0) + float(record.get("probe_usd") or 0.0)
    spend += extras
    if summary:
        spend = float(summary["cost_usd"]["total"])
        basis = "from the cloud's bill" if summary.get("cost_basis") == "cloud_bill" else "estimated"
    elif status and status.get("spend_usd") is not None:
        spend = float(status["spend_usd"])
    work = float(job.get("work_hours") or 0.0)
    cold = float(job.get("cold_start_hours") or 0.0)
    all_od = float(record.get("all_on_demand_usd") or 0.0)
    od_hours = work + cold
    deadline = float(record.get("deadline_hours") or job.get("deadline_hours") or 0.0)
    timeline = record.get("timeline") or []
    return JobFacts(
        job_id=record.get("job_id", "?"),
        policy=record.get("policy", "?"),
        finished=finished,
        elapsed_hours=elapsed,
        work_hours=work,
        deadline_hours=deadline,
        dag_deadline_hours=record.get("dag_deadline_hours"),
        cold_start_hours=cold,
        progress_hours=_progress(work, state, status),
        zones=_zones_in_order(segments),
        bars=bars,
        markers=_markers(segments, timeline),
        cost_points=[
            (h, usd + (extras if i == len(cost_points) - 1 else 0.0)) for i, (h, usd) in enumerate(cost_points)
        ],
        on_demand_points=[(0.0, 0.0), (od_hours, all_od)] if od_hours else [],
        progress_points=_progress_curve(segments, elapsed, work),
        spend_usd=round(spend, 2),
        all_on_demand_usd=round(all_od, 2),
        cost_basis=basis,
        slack_hours=None if status is None or finished else status.get("slack_hours"),
        deadline_met=summary.get("deadline_met") if summary else None,
        preemptions=int(record.get("preemptions") or 0),
        migrations=int(record.get("migrations") or 0),
        decisions=[t for t in timeline if t.get("event") == "decide"][-8:],
        story=[_say(t) for t in timeline if t.get("event") not in ("decide", "stay")],
    )


def _say(item: dict) -> str:
    try:
        return say(item)
    except (KeyError, TypeError, ValueError):  # an entry of another version: show its fields
        return f"[t={item.get('at_hours', '?')} h] {item.get('event', '?')}"


def _progress(work: float, state: dict, status: dict | None) -> float:
    """Checkpointed work: the record's, or the live status's when a later look saw more."""
    if not work:
        return 0.0
    done = float(state.get("progress_hours") or 0.0)
    if status and status.get("progress_pct") is not None:
        done = max(done, float(status["progress_pct"]) / 100.0 * work)
    return min(work, done)


def _elapsed(record: dict, status: dict | None, summary: dict | None) -> float:
    if summary and summary.get("elapsed_hours") is not None:
        return float(summary["elapsed_hours"])
    candidates = [float(status["elapsed_hours"])] if status and status.get("elapsed_hours") is not None else []
    candidates += [float(s.get("end_hours") or s.get("start_hours") or 0.0) for s in record.get("segments") or []]
    candidates += [float(t.get("at_hours") or 0.0) for t in record.get("timeline") or []]
    return max(candidates, default=0.0)


def _zones_in_order(segments: list[dict]) -> list[str]:
    zones: list[str] = []
    for seg in segments:
        if seg["zone"] not in zones:
            zones.append(seg["zone"])
    return zones


def _bars(segments: list[dict], elapsed: float) -> list[Bar]:
    bars, last_end = [], 0.0
    for seg in segments:
        start = float(seg["start_hours"])
        end = float(seg["end_hours"]) if seg.get("end_hours") is not None else elapsed
        if start - last_end > 1e-6:
            bars.append(Bar("idle", "idle", last_end, start))
        warm = min(end, start + float(seg.get("launch_delay_hours") or 0.0))
        kind = "spot" if seg["mode"] == "spot" else "on-demand"
        price = float(seg.get("usd_per_hour") or 0.0)
        if warm > start:
            bars.append(Bar(seg["zone"], "cold start", start, warm, price))
        bars.append(Bar(seg["zone"], kind, warm, end, price, seg.get("end")))
        last_end = max(last_end, end)
    return bars


def _markers(segments: list[dict], timeline: list[dict]) -> list[dict]:
    whys = [t for t in timeline if t.get("event") == "migrate"]
    markers = []
    for seg in segments:
        if seg.get("end") not in ("preempted", "migrated") or seg.get("end_hours") is None:
            continue
        at = float(seg["end_hours"])
        why = ""
        if seg["end"] == "migrated":
            near = [t for t in whys if abs(float(t["at_hours"]) - at) < 0.25 and t.get("from") in (seg["zone"], None)]
            why = (near[0].get("why") if near else "") or "the planner found a better place"
            why = f"moved away from {seg['zone']}: {why}"
        else:
            why = f"the cloud took the instances back in {seg['zone']}"
        markers.append({"at": at, "zone": seg["zone"], "kind": seg["end"], "why": why})
    return markers


def _cost_curve(segments: list[dict], elapsed: float) -> list[tuple[float, float]]:
    """Cumulative USD at every segment boundary, at the prices seen at launch."""
    edges = sorted(
        {0.0, elapsed}
        | {float(s["start_hours"]) for s in segments}
        | {float(s["end_hours"]) for s in segments if s.get("end_hours") is not None}
    )
    points = []
    for t in edges:
        usd = 0.0
        for seg in segments:
            start = float(seg["start_hours"])
            end = float(seg["end_hours"]) if seg.get("end_hours") is not None else elapsed
            usd += max(0.0, min(end, t) - start) * float(seg.get("usd_per_hour") or 0.0)
        points.append((round(t, 4), round(usd, 4)))
    return points


def _progress_curve(segments: list[dict], elapsed: float, work: float) -> list[tuple[float, float]]:
    points, progress = [(0.0, 0.0)], 0.0
    for seg in segments:
        start = float(seg["start_hours"])
        end = float(seg["end_hours"]) if seg.get("end_hours") is not None else elapsed
        warm = min(end, start + float(seg.get("launch_delay_hours") or 0.0))
        points.append((start, progress))
        points.append((warm, progress))
        progress = min(work, progress + max(0.0, end - warm)) if work else progress
        points.append((end, progress))
    return points


def dashboard_row(job_state: str | None, record: dict | None, status: dict | None) -> dict:
    """One line of the jobs dashboard: state, zone, % done, slack, spend, saving, deadline met."""
    if record is None:
        return {"state": job_state or "?", "zone": None, "pct": None, "slack": None, "spend": None, "saving": None}
    facts = job_facts(record, status)
    zone = (status or {}).get("zone") or (facts.zones[-1] if facts.zones else None)
    pct = 100.0 * facts.progress_hours / facts.work_hours if facts.work_hours else None
    if facts.finished and facts.deadline_met is not None:
        pct = 100.0
    preempted_in: dict[str, int] = {}
    for marker in facts.markers:
        if marker["kind"] == "preempted":
            preempted_in[marker["zone"]] = preempted_in.get(marker["zone"], 0) + 1
    return {
        "state": job_state or "?",
        "zone": zone,
        "pct": None if pct is None else round(pct, 1),
        "slack": facts.slack_hours,
        "spend": facts.spend_usd,
        "saving": round(facts.saving_usd, 2) if facts.finished else None,
        "all_on_demand": facts.all_on_demand_usd,
        "deadline_met": facts.deadline_met,
        "deadline_hours": facts.deadline_hours,
        "preempted_in": preempted_in,
        "finished": facts.finished,
    }

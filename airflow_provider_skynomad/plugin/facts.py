"""The figures a job page and the dashboard show, derived from a job record and its live status (plain dicts).

Pure: no Airflow, no I/O. Hours are cloud hours since the job started, as in the record.
Progress over time is rebuilt from the record's segments (a segment makes progress after its cold
start until it ends; a preemption loses what came after the last checkpoint, so the curve is an
upper bound between checkpoints); the checkpointed progress the record holds is shown beside it.

Whoever may write a DAG's task state can write these dicts, so every number is read through
`_number` and every list through `_objects`: a value of the wrong kind raises ValueError naming the
field (``status.slack_hours is 'x', not a number``), which the pages show in place of what they
could not draw. Strings are passed on as they are: the templates escape them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from airflow_provider_skynomad.jobs.narrate import say, start_up_left
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd


@dataclass
class Bar:
    """One stretch of the Gantt: a zone's lane from `start` to `end`, of one kind."""

    zone: str
    kind: str  # spot | on-demand | cold start | idle
    start: float
    end: float
    usd_per_hour: float = 0.0
    ended: SegmentEnd | str | None = None  # how its segment ended (text: a word unknown here); None: running


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
    markers: list[dict]  # {at, zone, kind: SegmentEnd.PREEMPTED or MIGRATED, why}
    cost_points: list[tuple[float, float]]  # (hours, cumulative USD)
    on_demand_points: list[tuple[float, float]]
    progress_points: list[tuple[float, float]]
    spend_usd: float
    all_on_demand_usd: float
    cost_basis: str  # cloud_bill | estimate | so far
    slack_hours: float | None
    deadline_met: bool | None
    preemptions: int
    migrations: int  # the runtime's: moves that carried a checkpoint (each one's egress billed)
    decisions: list[dict] = field(default_factory=list)  # the last few, and every one that moved the job
    story: list[str] = field(default_factory=list)
    declared_work_hours: float | None = None  # the user's figure, when the work measured differs from it
    launching_in: str | None = None  # the zone of a launch written down and not yet answered (`pending`)

    @property
    def moves(self) -> int:
        """The ▶ on the Gantt: each time the planner replaced or let go of a group and the job went on in
        another zone or mode (a switch from spot to on-demand in the same zone is one). The card counts
        these, so it says what the chart shows; `migrations` counts only those that copied a checkpoint."""
        return sum(1 for m in self.markers if m["kind"] is SegmentEnd.MIGRATED)

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
    for name, value in (("record", record), ("status", status or {})):
        if not isinstance(value, dict):
            raise ValueError(f"the {name} is {_shown(value)}, not an object")
    job = _object(record, "job", "record")
    state = _object(record, "state", "record")
    summary = _object(record, "summary", "record") or None
    segments = _segments(record)
    timeline = _objects(record, "timeline", "record")
    markers = _markers(segments, timeline)
    finished = bool(record.get("finished"))
    elapsed = _elapsed(segments, timeline, status, summary, state)
    cost_points = _cost_curve(segments, elapsed)
    spend = cost_points[-1][1] if cost_points else 0.0
    basis = "so far (launch-time prices)"
    extras = _number(record, "egress_usd", "record", 0.0) + _number(record, "probe_usd", "record", 0.0)
    spend += extras
    if summary:
        spend = _number(_object(summary, "cost_usd", "record.summary"), "total", "record.summary.cost_usd", 0.0)
        basis = "from the cloud's bill" if summary.get("cost_basis") == "cloud_bill" else "estimated"
    elif status and status.get("spend_usd") is not None:
        spend = _number(status, "spend_usd", "status")
        if status.get("cost_basis") == "cloud_bill":
            basis = "so far, from the cloud's bill"
    planned = _number(job, "work_hours", "record.job", 0.0)
    share = _progress(planned, state, status) / planned if planned else 0.0
    work, declared = _work(record, summary, planned)
    cold = _number(job, "cold_start_hours", "record.job", 0.0)
    all_od, od_hours = _all_on_demand(record, status, summary, work + cold)
    deadline = _number(record, "deadline_hours", "record") or _number(job, "deadline_hours", "record.job", 0.0)
    return JobFacts(
        job_id=str(record.get("job_id", "?")),
        policy=str(record.get("policy", "?")),
        finished=finished,
        elapsed_hours=elapsed,
        work_hours=work,
        deadline_hours=deadline,
        dag_deadline_hours=_number(record, "dag_deadline_hours", "record"),
        cold_start_hours=cold,
        progress_hours=share * work,
        zones=_zones_in_order(segments),
        bars=_bars(segments, elapsed),
        markers=markers,
        cost_points=[
            (h, usd + (extras if i == len(cost_points) - 1 else 0.0)) for i, (h, usd) in enumerate(cost_points)
        ],
        on_demand_points=[(0.0, 0.0), (od_hours, all_od)] if od_hours else [],
        progress_points=_progress_curve(segments, elapsed, work, _checkpointed_at_preemptions(timeline)),
        spend_usd=round(spend, 2),
        all_on_demand_usd=round(all_od, 2),
        cost_basis=basis,
        slack_hours=None if finished else _slack(job, state, status, deadline, elapsed),
        deadline_met=_flag(summary, "deadline_met", "record.summary") if summary else None,
        preemptions=int(_number(record, "preemptions", "record", 0.0)),
        migrations=int(_number(record, "migrations", "record", 0.0)),
        decisions=_decisions(timeline, [m["at"] for m in markers if m["kind"] is SegmentEnd.MIGRATED]),
        story=[_say(t) for t in timeline if not _quiet(t)],
        declared_work_hours=declared if abs(declared - work) > 0.005 else None,
        launching_in=_pending_zone(record),
    )


def _work(record: dict, summary: dict | None, planned: float) -> tuple[float, float]:
    """(work as measured, work declared) in hours: the basis `jobs.summary` reports the job on.

    The record's ``job.work_hours`` is the planner's bound (the measured work plus a margin), a
    third figure no summary shows; the page says progress on the measured work, as the summary does.
    """
    if summary and summary.get("work_hours") is not None:
        declared = _number(summary, "work_hours", "record.summary", planned)
        return _number(summary, "measured_work_hours", "record.summary", declared) or declared, declared
    pace = _object(record, "pace", "record") or {}
    declared = _number(pace, "declared_work_hours", "record.pace", planned) or planned
    done = _number(pace, "fraction", "record.pace", 0.0)
    hours = _number(pace, "productive_hours", "record.pace", 0.0)
    return (hours / done if done > 0 and hours > 0 else declared), declared


def _all_on_demand(record: dict, status: dict | None, summary: dict | None, planned_hours: float):
    """(USD, hours) of the all-on-demand comparison, on the basis the runtime says it on
    (`jobs.summary.all_on_demand_usd`: the work measured): the summary's figure once the job has
    ended, the live status's while it runs, the record's (the declared work) before either. Its
    hours follow from the on-demand price the record keeps; a record without one, from the plan."""
    usd = _number(record, "all_on_demand_usd", "record", 0.0)
    if summary and summary.get("all_on_demand_cost_usd") is not None:
        usd = _number(summary, "all_on_demand_cost_usd", "record.summary")
    elif status and status.get("all_on_demand_usd") is not None:
        usd = _number(status, "all_on_demand_usd", "status")
    rate = _number(record, "on_demand_usd_per_hour", "record", 0.0)
    return usd, (usd / rate if rate > 0 else planned_hours)


def _number(mapping: dict, key: str, where: str, default: float | None = None) -> float | None:
    """``mapping[key]`` as a finite float, `default` when it is absent or null; anything else raises
    ValueError saying which field held what."""
    value = mapping.get(key)
    if value is None:
        return default
    try:
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number):
        raise ValueError(f"{where}.{key} is {_shown(value)}, not a number")
    return number


def _flag(mapping: dict, key: str, where: str) -> bool | None:
    """``mapping[key]`` as true, false or None (absent)."""
    value = mapping.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{where}.{key} is {_shown(value)}, not true or false")
    return value


def _object(mapping: dict, key: str, where: str) -> dict:
    """``mapping[key]`` as a dict ({} when absent or null)."""
    value = mapping.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}.{key} is {_shown(value)}, not an object")
    return value


def _objects(mapping: dict, key: str, where: str) -> list[dict]:
    """``mapping[key]`` as a list of dicts ([] when absent or null)."""
    value = mapping.get(key) or []
    if not isinstance(value, list):
        raise ValueError(f"{where}.{key} is {_shown(value)}, not a list")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"{where}.{key}.{i} is {_shown(item)}, not an object")
    return value


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


@dataclass
class _Segment:
    """A record's segment with its numbers checked (the record's own dict, validated once)."""

    zone: str
    spot: bool
    start: float
    end: float | None  # None: still running
    delay: float  # cold start
    usd_per_hour: float
    ended: SegmentEnd | str | None


def _segments(record: dict) -> list[_Segment]:
    segments = []
    for i, seg in enumerate(_objects(record, "segments", "record")):
        where = f"record.segments.{i}"
        if seg.get("zone") is None or _number(seg, "start_hours", where) is None:
            raise ValueError(f"{where} has no zone or no start_hours")
        segments.append(
            _Segment(
                zone=str(seg["zone"]),
                spot=seg.get("mode") == "spot",
                start=_number(seg, "start_hours", where),
                end=_number(seg, "end_hours", where),
                delay=_number(seg, "launch_delay_hours", where, 0.0),
                usd_per_hour=_number(seg, "usd_per_hour", where, 0.0),
                ended=_ended(seg.get("end")),
            )
        )
    return segments


def _ended(value) -> SegmentEnd | str | None:
    """A segment's ``end`` as a `SegmentEnd` (None: still running); a word this version does not
    know (another version's, a hand-edited record's) is passed on as text for the chart's tooltip."""
    if value is None:
        return None
    try:
        return SegmentEnd(value)
    except (TypeError, ValueError):
        return str(value)


def _quiet(item: dict) -> bool:
    kind = NoteKind.of(item)
    return kind is not None and kind.quiet


LAST_DECISIONS = 8  # the page's table: the latest few, and every decision that moved the job


def _decisions(timeline: list[dict], moved_at: list[float]) -> list[dict]:
    """The decisions the page's table shows, oldest first: the last `LAST_DECISIONS`, and the one behind
    each move (`moved_at`: the ▶ times), the latest decision noted at or before it, however many
    decisions came after (a move's decision is the one a reader looks for)."""
    decides = [(i, t) for i, t in enumerate(timeline) if NoteKind.of(t) is NoteKind.DECIDE]
    movers = set()
    for at in moved_at:
        before = [i for i, t in decides if _number(t, "at_hours", f"record.timeline.{i}", 0.0) <= at + 1e-6]
        if before:
            movers.add(before[-1])
    shown = sorted({i for i, _ in decides[-LAST_DECISIONS:]} | movers)
    return [_decision(timeline[i]) | {"moved": i in movers} for i in shown]


def _decision(item: dict) -> dict:
    """A "decide" entry as the page's table shows it: the choice, the reason, the options it weighed."""
    options = item.get("options") or []
    return {
        "at_hours": item.get("at_hours", 0),
        "want": str(item.get("want", "")),
        "reason": str(item.get("reason", "")),
        "options": [
            {
                "rank": "" if o.get("rank") is None else str(o["rank"]),
                "mode": str(o.get("mode", "")),
                "market": str(o.get("market", "")),
                "figures": o,
            }
            for o in (options if isinstance(options, list) else [])
            if isinstance(o, dict)
        ],
    }


def _say(item: dict) -> str:
    try:
        return say(item)
    except (KeyError, TypeError, ValueError):  # an entry of another version: show its fields
        return f"[t={item.get('at_hours', '?')} h] {item.get('event', '?')}"


def _progress(work: float, state: dict, status: dict | None) -> float:
    """Checkpointed work: the record's, or the live status's when a later look saw more."""
    if not work:
        return 0.0
    done = _number(state, "progress_hours", "record.state", 0.0)
    if status and status.get("progress_pct") is not None:
        done = max(done, _number(status, "progress_pct", "status") / 100.0 * work)
    return min(work, done)


def _slack(job: dict, state: dict, status: dict | None, deadline: float, elapsed: float) -> float | None:
    """The slack the live status says; before the trigger's first publish (a page opened right after the
    hand-off), the same sum from the record (`jobs.narrate.where_it_stands`): the deadline minus the time
    gone, the work left and the start-up still to pay, so a first look says whether the job is on time."""
    if status is not None:
        return _number(status, "slack_hours", "status")
    remaining = max(
        0.0, _number(job, "work_hours", "record.job", 0.0) - _number(state, "progress_hours", "record.state", 0.0)
    )
    running = state.get("running")
    on_demand = isinstance(running, dict) and running.get("mode") == "on-demand"
    if remaining <= 0.0:
        warmup = 0.0
    elif on_demand:
        left, state_at, launched = (
            _number(state, key, "record.state", 0.0)
            for key in ("warmup_left_hours", "elapsed_hours", "running_since_hours")
        )
        warmup = start_up_left(left, state_at, launched, elapsed)
    else:
        warmup = _number(job, "cold_start_hours", "record.job", 0.0)
    return deadline - elapsed - remaining - warmup


def _elapsed(
    segments: list[_Segment], timeline: list[dict], status: dict | None, summary: dict | None, state: dict
) -> float:
    """Cloud hours since the start: the summary's once it ended, else the latest any part of the record
    or the live status has seen (the record's state included: before the trigger's first publish it is
    where the worker left the job)."""
    if summary and summary.get("elapsed_hours") is not None:
        return _number(summary, "elapsed_hours", "record.summary")
    candidates = (
        [_number(status, "elapsed_hours", "status")] if status and status.get("elapsed_hours") is not None else []
    )
    candidates.append(_number(state, "elapsed_hours", "record.state", 0.0))
    candidates += [seg.end if seg.end is not None else seg.start for seg in segments]
    candidates += [_number(t, "at_hours", f"record.timeline.{i}", 0.0) for i, t in enumerate(timeline)]
    return max(candidates, default=0.0)


def _zones_in_order(segments: list[_Segment]) -> list[str]:
    zones: list[str] = []
    for seg in segments:
        if seg.zone not in zones:
            zones.append(seg.zone)
    return zones


def _bars(segments: list[_Segment], elapsed: float) -> list[Bar]:
    bars, last_end = [], 0.0
    for seg in segments:
        end = seg.end if seg.end is not None else elapsed
        if seg.start - last_end > 1e-6:
            bars.append(Bar("idle", "idle", last_end, seg.start))
        warm = min(end, seg.start + seg.delay)
        if warm > seg.start:
            bars.append(Bar(seg.zone, "cold start", seg.start, warm, seg.usd_per_hour))
        bars.append(Bar(seg.zone, "spot" if seg.spot else "on-demand", warm, end, seg.usd_per_hour, seg.ended))
        last_end = max(last_end, end)
    return bars


def _markers(segments: list[_Segment], timeline: list[dict]) -> list[dict]:
    """A ✕ where the cloud took a group back, a ▶ where the planner moved the job; why it moved is
    read from the note that ended the segment (its ``ends_segment``): a release's why, a launch's
    cause (the deadline's on-demand net) and why."""
    ended_by = _notes_ending_segments(timeline)
    markers = []
    for k, seg in enumerate(segments):
        if seg.end is None:
            continue
        note = ended_by.get(k, {})
        if seg.ended is SegmentEnd.RELEASED and _moved_on(segments, k):
            why = note.get("why") or "the planner released the group here"
            markers.append(
                {"at": seg.end, "zone": seg.zone, "kind": SegmentEnd.MIGRATED, "why": f"left {seg.zone}: {why}"}
            )
        elif seg.ended is SegmentEnd.MIGRATED:
            markers.append(
                {"at": seg.end, "zone": seg.zone, "kind": SegmentEnd.MIGRATED, "why": _why_moved(segments, k, note)}
            )
        elif seg.ended is SegmentEnd.PREEMPTED:
            why = f"the cloud took the instances back in {seg.zone}"
            markers.append({"at": seg.end, "zone": seg.zone, "kind": SegmentEnd.PREEMPTED, "why": why})
    return markers


def _notes_ending_segments(timeline: list[dict]) -> dict[int, dict]:
    """Segment index → the note that ended it (a release, or the launch that replaced its group)."""
    ended_by = {}
    for item in timeline:
        k = item.get("ends_segment")
        if isinstance(k, int) and not isinstance(k, bool):
            ended_by[k] = item
    return ended_by


def _why_moved(segments: list[_Segment], k: int, note: dict) -> str:
    """Why segment `k`'s group was replaced, from `note` (the launch that replaced it, {} when the
    record is older than such notes)."""
    zone = segments[k].zone
    same_zone = k + 1 < len(segments) and segments[k + 1].zone == zone
    if note.get("cause") == NoteKind.DEADLINE_PRESSURE:
        return f"switched to on-demand{'' if same_zone else f' away from {zone}'} to stay on time"
    if same_zone:
        return f"switched in {zone}: " + (note.get("why") or "the planner's choice")
    return f"moved away from {zone}: " + (note.get("why") or "the planner found a better place")


def _moved_on(segments: list[_Segment], k: int) -> bool:
    """The job launched again in another zone after the planner released segment `k`'s group (the
    page marks where it left; ``migrations`` count only the moves that carried a checkpoint)."""
    return k + 1 < len(segments) and segments[k + 1].zone != segments[k].zone


def _cost_curve(segments: list[_Segment], elapsed: float) -> list[tuple[float, float]]:
    """Cumulative USD at every segment boundary, at the prices seen at launch."""
    edges = sorted(
        {0.0, elapsed} | {seg.start for seg in segments} | {seg.end for seg in segments if seg.end is not None}
    )
    points = []
    for t in edges:
        usd = 0.0
        for seg in segments:
            end = seg.end if seg.end is not None else elapsed
            usd += max(0.0, min(end, t) - seg.start) * seg.usd_per_hour
        points.append((round(t, 4), round(usd, 4)))
    return points


def _progress_curve(
    segments: list[_Segment], elapsed: float, work: float, checkpointed: list[tuple[float, float]] = ()
) -> list[tuple[float, float]]:
    """Work done against time, rebuilt from the segments: every productive hour counts (an upper
    bound between checkpoints), and at a preemption the curve drops to the share of the work the
    log says was checkpointed then (`checkpointed`: (hours, share)), where the next group resumes."""
    points, progress = [(0.0, 0.0)], 0.0
    for seg in segments:
        end = seg.end if seg.end is not None else elapsed
        warm = min(end, seg.start + seg.delay)
        points.append((seg.start, progress))
        points.append((warm, progress))
        progress = min(work, progress + max(0.0, end - warm)) if work else progress
        points.append((end, progress))
        if seg.ended is SegmentEnd.PREEMPTED and work:
            kept = [share for at, share in checkpointed if abs(at - end) < 0.25]
            if kept and kept[0] * work < progress:
                progress = kept[0] * work
                points.append((end, progress))
    return points


def _checkpointed_at_preemptions(timeline: list[dict]) -> list[tuple[float, float]]:
    """(hours, share of the work checkpointed) of every preemption the log told, e.g. "35%"."""
    kept = []
    for i, item in enumerate(timeline):
        said = item.get("progress")
        if NoteKind.of(item) is not NoteKind.PREEMPTED or not isinstance(said, str) or not said.endswith("%"):
            continue
        try:
            share = float(said[:-1]) / 100.0
        except ValueError:
            continue
        if math.isfinite(share):
            kept.append((_number(item, "at_hours", f"record.timeline.{i}", 0.0), min(1.0, max(0.0, share))))
    return kept


# A task that failed before its job started wrote nothing (bad input fails before anything is
# written): its reason is in its log only.
FAILED_BEFORE_START = "failed before its job started (its input or settings): the first ERROR line of its log says why"


def failure_reason(job_state: str | None, record: dict | None, status: dict | None) -> str | None:
    """Why a failed task failed, in the words its job said it (None when it did not fail)."""
    status = status or {}
    if job_state not in ("failed", "upstream_failed") and status.get("state") != "failed":
        return None
    if job_state == "upstream_failed":
        return "an upstream task failed: this one never ran"
    if status.get("reason"):
        return str(status["reason"])
    if record is None:
        return FAILED_BEFORE_START
    timeline = _objects(record, "timeline", "record")
    noted = [t for t in timeline if NoteKind.of(t) in (NoteKind.FAILED, NoteKind.DEADLINE_RISK)]
    summary = record.get("summary") or {}
    if isinstance(summary, dict) and summary.get("deadline_met") is False:
        return "it finished after its deadline"
    if noted:
        return _say(noted[-1]).split("] ", 1)[-1]
    return "the task failed after its job started; its log says why"


def _record_zone(record: dict) -> str | None:
    """Where the record says the job is, for a row without a live status yet (the trigger has not
    published; the worker may still be launching): its last segment's zone, else the zone of the launch
    it wrote down before sending it (``pending``), else None."""
    segments = _segments(record)
    return segments[-1].zone if segments else _pending_zone(record)


def _pending_zone(record: dict) -> str | None:
    """The zone of the launch the record wrote down before sending it (None: none in flight)."""
    pending = record.get("pending")
    request = pending.get("request") if isinstance(pending, dict) else None
    zone = request.get("zone") if isinstance(request, dict) else None
    return zone if isinstance(zone, str) and zone else None


def dashboard_row(job_state: str | None, record: dict | None, status: dict | None) -> dict:
    """One line of the jobs dashboard: state (and why, when it failed), zone (where it runs now, or ended)
    and the other zones it ran in (in the order it first went there), % done, slack, spend, saving,
    deadline met."""
    reason = failure_reason(job_state, record, status)
    if record is None:
        return {
            "state": job_state or "?",
            "reason": reason,
            "zone": None,
            "other_zones": [],
            "pct": None,
            "slack": None,
            "spend": None,
            "saving": None,
        }
    facts = job_facts(record, status)
    zone = (status or {}).get("zone") or _record_zone(record)
    zone = None if zone is None else str(zone)
    pct = 100.0 * facts.progress_hours / facts.work_hours if facts.work_hours else None
    if facts.finished and facts.deadline_met is not None:
        pct = 100.0
    preempted_in: dict[str, int] = {}
    for marker in facts.markers:
        if marker["kind"] is SegmentEnd.PREEMPTED:
            preempted_in[marker["zone"]] = preempted_in.get(marker["zone"], 0) + 1
    return {
        "state": job_state or "?",
        "reason": reason,
        "zone": zone,
        "other_zones": [z for z in facts.zones if z != zone],
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

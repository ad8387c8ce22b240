"""What the job says to people: one plain-words line per thing that happened, and a compact live status.

The planner's own numbers (V, U, η) are for the explain view and DEBUG logs; users read where the
job runs, why it moved, how far it is, how much slack is left and what it has spent.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_provider_skynomad.clouds.base import GroupHandle
from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.jobs.summary import all_on_demand_usd
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.timeline import NoteKind


def say(item: dict) -> str:
    """One timeline note in plain words (the task log line written when it happens); a note of a kind
    this version does not know (another version's record) is shown as its fields."""
    words = SAYINGS.get(NoteKind.of(item), _fields)
    return f"[t={item['at_hours']:.2f} h] {words(item)}"


def _fields(item: dict) -> str:
    details = " ".join(f"{k}={v}" for k, v in item.items() if k not in ("at_hours", "event"))
    return f"{item.get('event')} {details}".rstrip()


def _because(item: dict) -> str:
    return f": {item['why']}" if item.get("why") else ""


def _start(item: dict) -> str:
    return (
        f"started: {item['work_h']:g} h of work, deadline in {item['deadline_h']:g} h, "
        f"{item['zones']} zone(s) to choose from, policy {item['policy']}"
    )


def _launch(item: dict) -> str:
    left = f", after the planner released the group in {item['left']}" if item.get("left") else ""
    return f"launched {item['mode']} in {item.get('zone')} at ${item['usd_per_h']:.2f}/h{left}"


def _migrate(item: dict) -> str:
    return (
        f"moved to {item.get('zone')} ({item['mode']}, ${item['usd_per_h']:.2f}/h), checkpoint copied from "
        f"{item['from']}{_because(item)}"
    )


def _preempted(item: dict) -> str:
    return f"preempted in {item.get('zone')} with {item.get('progress') or '?'} of the work checkpointed"


def _no_capacity(item: dict) -> str:
    return f"no {item['mode']} capacity in {item.get('zone')}"


def _cloud_api(item: dict) -> str:
    return f"the cloud API did not take the {item['mode']} launch in {item.get('zone')}: {item.get('error', '')}"


def _release(item: dict) -> str:
    return f"released the group in {item.get('zone')}{_because(item)}"


def _deadline_pressure(item: dict) -> str:
    why = f" ({item['why']})" if item.get("why") else ""
    if item.get("first_launch"):  # nothing runs yet: the job starts on the net, it moves nowhere
        return f"deadline pressure: starting on on-demand to stay on time{why}"
    return f"deadline pressure: moving to on-demand now to stay on time{why}"


def _reaction_lag(item: dict) -> str:
    return (
        f"the triggerer acted {item['hours']:.2f} cloud h late ({item['wall_seconds']:.1f} s of wall "
        f"time: a busy box); planning with a {item['planned_hours']:.2f} h margin"
    )


def _slow_start(item: dict) -> str:
    return (
        f"the group's first checkpoint came {item['hours']:.2f} h after launch (declared cold start "
        f"{item['declared']:g} h); later launches are planned with that"
    )


def _deadline_risk(item: dict) -> str:
    why = (
        "the time preemptions, relaunches and waiting already cost"
        if item.get("cause") == "time lost"
        else "the work measured is more than declared"
    )
    return (
        f"DEADLINE AT RISK: even on-demand from now would finish at {item['finish_h']:.2f} h, after the "
        f"deadline at {item['deadline_h']:.2f} h ({why}); the job goes on as fast as it can"
    )


def _cost_revised(item: dict) -> str:
    return (
        f"the final cost ${item['final_usd']:.2f} ({basis_words(item['final_basis'])}) is below the "
        f"${item['live_usd']:.2f} said while the job ran ({basis_words(item['live_basis'])})"
    )


def pace_words(item: dict) -> str:
    """A "pace" note in words: the pace as measured, and apart from it the bound the planner plans
    with (a margin for what a few checkpoints cannot tell yet), e.g. "runs 25 % slower than declared:
    about 6.0 h of work left, not 4.8 h; planning with up to 32 % slower (6.3 h left) to be safe".
    Notes written before the bound was kept apart (no ``planning_ratio``) said the bound's hours."""
    ratio = item["ratio"]
    left, declared = item["left_h"], item["declared_left_h"]
    if ratio == 1.0:  # a pace said before, which the checkpoints since put back at the declared one
        return f"the workload runs about as declared after all: about {declared:.1f} h of work left"
    how = _percent_off(ratio)
    words = f"the workload runs {how} than declared: about {left:.1f} h of work left, not {declared:.1f} h"
    planning = item.get("planning_ratio")
    if planning is None or round(100 * planning) == round(100 * ratio):
        return f"{words}; planning with that"
    if planning > 1.0:
        return f"{words}; planning with up to {_percent_off(planning)} ({item['planned_left_h']:.1f} h left) to be safe"
    return f"{words}; planning with {item['planned_left_h']:.1f} h left until more checkpoints confirm it"


def _percent_off(ratio: float) -> str:
    return f"{100 * (ratio - 1):.0f} % slower" if ratio >= 1 else f"{100 * (1 - ratio):.0f} % faster"


# One small function per kind of note. The quiet kinds (a decision, a stay) are shown as their
# fields where they are shown at all (the final timeline in the task log).
SAYINGS: dict[NoteKind, Callable[[dict], str]] = {
    NoteKind.START: _start,
    NoteKind.DECIDE: _fields,
    NoteKind.STAY: _fields,
    NoteKind.LAUNCH: _launch,
    NoteKind.MIGRATE: _migrate,
    NoteKind.RELEASE: _release,
    NoteKind.PREEMPTED: _preempted,
    NoteKind.NO_CAPACITY: _no_capacity,
    NoteKind.CLOUD_API: _cloud_api,
    NoteKind.STALE_MARKET: lambda item: str(item["words"]),
    NoteKind.IDLE: lambda item: f"waiting without instances ({item['reason']})",
    NoteKind.PROBE: lambda item: f"probed {item.get('zone')}: {item['available']} available",
    NoteKind.DEADLINE_PRESSURE: _deadline_pressure,
    NoteKind.REACTION_LAG: _reaction_lag,
    NoteKind.SLOW_START: _slow_start,
    NoteKind.PACE: pace_words,
    NoteKind.DEADLINE_RISK: _deadline_risk,
    NoteKind.COST_REVISED: _cost_revised,
    NoteKind.FINISHED: lambda item: "the workload finished",
    NoteKind.FAILED: lambda item: f"the group failed: {item.get('reason', '')}",
}


def why_move(record: JobRecord, view: MarketView, before: JobState, target: Option | None, at_hours: float) -> str:
    """Why the job goes from where it was (`before`, its state until this step) to `target`, in facts
    a user can check: preemptions and refused launches there, the price gap. A job with no group
    (after a preemption) was where its checkpoint is."""
    reasons = []
    source = before.running
    where = source.market if source is not None else before.checkpoint_market
    zone = _zone(view, where)
    if zone is not None:
        recent = [
            n
            for n in record.timeline
            if n.get("zone") == zone
            and at_hours - n["at_hours"] <= 1.0
            and n["event"] in (NoteKind.PREEMPTED, NoteKind.NO_CAPACITY)
        ]
        preempted = sum(n["event"] == NoteKind.PREEMPTED for n in recent)
        if preempted >= 2:
            reasons.append(f"{zone} preempted {preempted} times in 1 h")
        if source is None and any(n["event"] == NoteKind.NO_CAPACITY and n.get("mode") == "spot" for n in recent):
            reasons.append(f"{zone} has no spot capacity")
    if target is not None and source is not None and source.market in view.keys and target.market in view.keys:
        gap = _price(record, view, source) - _price(record, view, target)
        if gap > 0.005:
            reasons.append(f"{gap:.2f} $/h cheaper")
        elif target.mode is Mode.ON_DEMAND and source.mode is Mode.SPOT:
            reasons.append("on-demand keeps the deadline safe")
    return "; ".join(reasons)


def _zone(view: MarketView, market: str | None) -> str | None:
    if market is None:
        return None
    return view.markets[view.index(market)].zone if market in view.keys else market


def _price(record: JobRecord, view: MarketView, option: Option) -> float:
    j = view.index(option.market)
    table = view.spot_usd_per_hour if option.mode is Mode.SPOT else view.on_demand_usd_per_hour
    return float(table[j]) * record.job.instances


def live_status(record: JobRecord, elapsed_hours: float, spend_usd: float) -> dict:
    """The compact status kept in the task state store (and logged) while the job runs.

    `market`, `instances` and `launched_at_cloud_hours` (the cloud's clock at the group's launch) are
    what the deployment's other jobs read of it to know the capacity it holds (`jobs.live.fleet_rows`).
    """
    running = record.state.running if record.group is not None and not record.finished else None
    return {
        **where_it_stands(
            record.job_id, record.job, record.state, record.group, record.deadline_hours, elapsed_hours, record.finished
        ),
        "spend_usd": round(spend_usd, 2),
        "all_on_demand_usd": round(all_on_demand_usd(record), 2),
        "preemptions": record.preemptions,
        "migrations": record.migrations,
        "market": running.market if running else None,
        "instances": record.job.instances,
        "launched_at_cloud_hours": (
            round(record.job_start_hours + record.state.running_since_hours, 6) if running else None
        ),
        "wants": record.wants if record.group is None and not record.finished else None,
    }


def where_it_stands(
    job_id: str,
    job: JobSpec,
    state: JobState,
    group: GroupHandle | None,
    deadline_hours: float,
    elapsed_hours: float,
    finished: bool = False,
) -> dict:
    """Zone, mode, checkpointed progress and slack: the part of the live status a trigger sees too."""
    remaining = max(0.0, job.work_hours - state.progress_hours)
    running = state.running
    # A finished job (or one with all its work checkpointed) has no start-up left to pay; an on-demand
    # group pays only what is left of its own start-up; anything else may still need the net's.
    done = finished or remaining <= 0.0
    if done:
        warmup = 0.0
    elif running is not None and running.mode is Mode.ON_DEMAND:
        warmup = start_up_left(state.warmup_left_hours, state.elapsed_hours, state.running_since_hours, elapsed_hours)
    else:
        warmup = job.cold_start_hours
    slack = deadline_hours - elapsed_hours - remaining - warmup
    return {
        "job_id": job_id,
        "state": "finished" if finished else ("running" if group else "idle"),
        "zone": group.zone if group else None,
        "mode": running.mode.value if running else None,
        "progress_pct": round(100.0 * min(1.0, state.progress_hours / job.work_hours), 1),
        "elapsed_hours": round(elapsed_hours, 3),
        "deadline_hours": round(deadline_hours, 3),
        "slack_hours": round(slack, 3),
    }


def start_up_left(
    warmup_left_hours: float, state_at_hours: float, running_since_hours: float, elapsed_hours: float
) -> float:
    """The start-up a group still has to pay at `elapsed_hours`, from what a state of `state_at_hours` said
    of it (`warmup_left_hours`), counted from the later of that and the group's launch: a launch sets
    the start-up it will pay, whatever the state's own time."""
    as_of = max(state_at_hours, running_since_hours)
    return max(0.0, warmup_left_hours - max(0.0, elapsed_hours - as_of))


def basis_words(basis: str | None) -> str:
    """Where a cost figure comes from (`jobs.summary`'s ``cost_basis``), in words."""
    return "the cloud's bill" if basis == "cloud_bill" else "estimated at launch-time prices"


def status_line(status: dict) -> str:
    """The live status as the one line the task log shows at each step, so a user can follow the job there."""
    where = f"{status['mode']} in {status['zone']}" if status["zone"] else "no instances"
    return (
        f"[t={status['elapsed_hours']:.2f} h] {where}, {status['progress_pct']:.0f}% done (checkpointed), "
        f"slack {status['slack_hours']:.2f} h, spent ${status['spend_usd']:.2f} so far "
        f"({basis_words(status.get('cost_basis'))}; all on-demand: ${status['all_on_demand_usd']:.2f})"
    )

"""What the controller learns as the job runs, and plans with from then on: its lag, the warm-up, the pace.

Why the job learns: the planner's inputs are declared by the user (work, cold start) or assumed
(Airflow reacts at once). The controller measures each: its own lateness (a busy triggerer's
loop, the database) is kept and the slowest seen becomes the job's `reaction_hours`, which the
planner's safety net plans with (a change may start that late, a rescue two lags late); a group's
warm-up from launch to its first checkpoint; the workload's real pace from its checkpoints. Each
is said when it is news, and written to the record the moment it changes the plan.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from airflow_provider_skynomad.jobs.deadline_risk import call_deadline_risk
from airflow_provider_skynomad.jobs.narrate import say
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.safety import spare_slack_hours, warmup_hours
from airflow_provider_skynomad.planner.timeline import NoteKind

MAX_LAGS_KEPT = 50
PACE_NEWS = 0.1  # a measured pace is said again once it moved this much (10 %) from the last said
PACE_WARNING = 0.1  # a workload measured more than 10 % slower than declared is said at WARNING
# A pace is said as a number only once it is backed: this many checkpoints observed, over this share of
# the work, and off the declared pace by more than its uncertainty (`Pace.ratio_to_declared`). The
# planner plans with the pace's bound from the first observation; the words wait for the evidence.
PACE_TOLD_CHECKPOINTS = 2
PACE_TOLD_SHARE = 0.1
NEWS_LAG_HOURS = 1.0 / 60.0  # a controller lag below a minute of cloud time is planned with, not told
# The planner already lets a rescue come two lags late. Two more: the rescue's own cold start may
# run a lag beyond the longest measured (its launch is a cloud call on the same busy box), and the
# end of the job comes after the end of the work: the workload's final write and exit, and the
# look that sees it, each as slow as the box.
GUARD_LAGS = 2.0
# Half a step: a tenth to see a finished workload (the trigger polls faster then), the rest for a
# start-up beyond the declared cold start before the group's first checkpoint has measured it.
MARGIN_STEPS = 0.5


def guard_hours(step_hours: float, max_lag_hours: float) -> float:
    """How much earlier than the task's deadline the planner aims: Airflow's own lag, a few times over.

    The planner's safety net lets a change start one lag late and a rescue come two lags late,
    and counts the job done when its work is. It is not: the workload still writes its result and
    exits, and a look must see it; and the rescue's cold start can run longer than any measured
    yet. Each takes about a lag on a busy box, so the job plans against a deadline two lags
    earlier, and by half a decision step (seeing the workload's end, and a slower start than declared).
    """
    return GUARD_LAGS * max_lag_hours + MARGIN_STEPS * step_hours


def too_thin_for_spot(job: JobSpec, view: MarketView, decision: Decision, hand_off_hours: float) -> str | None:
    """Why the job's first launch should be on-demand although the planner chose spot; None when spot may gain.

    The worker decides, launches and hands the job to its controller, whose first look (the first
    moment a rescue can be launched) comes after that hand-off: on a busy box as slow as the
    worker's own start (`hand_off_hours`), which no step of the planner counts. A spot group gains
    only once its cold start is over, and only while the safety net's rescue need not start yet:
    when the slack left after the net's own cold start, its lead and the guard
    (`planner.safety.spare_slack_hours`) is less than the spot group's warm-up, one step of its
    progress and the hand-off, the launch would be given up before it makes any progress, having
    spent slack the deadline needed. Start on-demand at once then.
    """
    first = decision.first
    if first is None or first.mode is not Mode.SPOT:
        return None
    state = JobState()
    spare = spare_slack_hours(job, state, view)
    if spare >= warmup_hours(job, state, view, first) + view.step_hours + hand_off_hours:
        return None
    return "the slack is too thin for a spot launch to gain anything before the deadline needs on-demand"


def learn_lag(run, lag_hours: float, wall_seconds: float) -> None:
    """The controller acted `lag_hours` after it meant to (a busy triggerer, a slow database):
    keep it, and plan with the slowest seen (see the module docstring). A lag is said (and the
    record written) only when it is news: a minute of cloud time or more, half again the last said."""
    record = run.record
    lag = max(0.0, float(lag_hours))
    record.lags_hours = [*record.lags_hours, round(lag, 5)][-MAX_LAGS_KEPT:]
    if lag <= record.job.reaction_hours:
        return
    aim = record.deadline_hours - guard_hours(run.params.step_hours, lag)
    # Aim earlier only while one on-demand run could still make that (a huge lag must not make
    # the spec itself impossible: the job keeps its last aim and plans with the lag).
    feasible = aim >= record.job.work_hours + record.job.cold_start_hours
    deadline = aim if feasible else record.job.deadline_hours
    record.job = replace(record.job, reaction_hours=lag, deadline_hours=deadline)
    said = max((n["hours"] for n in record.noted(NoteKind.REACTION_LAG)), default=0.0)
    if lag < max(NEWS_LAG_HOURS, 1.5 * said):
        return
    margin = 2 * lag + (record.deadline_hours - deadline)
    item = record.note(
        run.elapsed(),
        NoteKind.REACTION_LAG,
        hours=round(lag, 3),
        wall_seconds=round(wall_seconds, 2),
        planned_hours=round(margin, 3),
    )
    run.say(item)
    run.store.save(record)


def learn_pace(run, at: float, pace: Pace | None, done: float | None = None) -> bool:
    """Plan with what the checkpoints say of the real work (`planner.pace`), and say what is news:
    a pace slower (or faster) than declared, and at once when even on-demand now would be late.
    `done`: the share of the work checkpointed at `at` (the controller's last look; the record's
    state is the job as last acted on, which can be hours older). True when something was said."""
    record = run.record
    if pace is None or pace == record.pace:
        return False
    left = _left_share(record, done)
    old_bound = record.job.work_hours
    record.pace = pace
    record.job = pace.planning_job(record.job)
    if record.job.work_hours != old_bound and old_bound > 0:
        share = record.state.progress_hours / old_bound  # the same checkpointed share, at the new bound
        record.state = record.state.progressed(share * record.job.work_hours)
    said = _tell_pace(run, at, pace, left) | _tell_deadline_risk(run, at, pace, left)
    if said:
        run.store.save(record)
    return said


def _tell_pace(run, at: float, pace: Pace, left_share: float) -> bool:
    """Say a pace that moved `PACE_NEWS` from the last said; a slow one at WARNING. A pace said
    before that the checkpoints now put back within `PACE_NEWS` of the declared is said to be
    "about as declared", so the last number in the log is never one the evidence left behind."""
    record = run.record
    ratio = told_ratio(pace)
    if (
        ratio is None
        and record.pace_told != 1.0
        and abs(pace.work_hours_estimate / pace.declared_work_hours - 1.0) < (PACE_NEWS / 2)
    ):
        ratio = 1.0
    if ratio is None or abs(ratio - record.pace_told) < PACE_NEWS:
        return False
    record.pace_told = ratio
    # Said as measured (the point estimate), with the bound the planner plans with kept apart.
    planning = pace.work_hours_bound / pace.declared_work_hours
    estimate = pace.work_hours_estimate if ratio != 1.0 else pace.declared_work_hours
    item = record.note(
        at,
        NoteKind.PACE,
        ratio=round(ratio, 3),
        planning_ratio=round(planning, 3),
        left_h=round(left_share * estimate, 2),
        planned_left_h=round(left_share * pace.work_hours_bound, 2),
        declared_left_h=round(left_share * pace.declared_work_hours, 2),
    )
    # Work well beyond what was declared eats the slack the deadline was set with: a warning.
    run.say(item, logging.WARNING if ratio > 1.0 + PACE_WARNING else logging.INFO)
    return True


def told_ratio(pace: Pace) -> float | None:
    """Measured work ÷ declared, when the checkpoints back it enough to say as a number: observed
    `PACE_TOLD_CHECKPOINTS` times over `PACE_TOLD_SHARE` of the work, and off the declared pace by
    more than the estimate's uncertainty. None otherwise (said as nothing, never as a guess)."""
    if pace.checkpoints < PACE_TOLD_CHECKPOINTS or pace.fraction < PACE_TOLD_SHARE:
        return None
    return pace.slower_than_declared() or pace.faster_than_declared()


def _left_share(record, done: float | None) -> float:
    """The share of the work the checkpoints do not prove yet: `done` seen at the last look, else the record's."""
    if done is not None:
        return max(0.0, 1.0 - done)
    job = record.job
    return max(0.0, 1.0 - record.state.progress_hours / job.work_hours) if job.work_hours else 0.0


def _tell_deadline_risk(run, at: float, pace: Pace, left_share: float) -> bool:
    """Even on-demand from now, at the measured pace, would finish after the task's deadline."""
    record = run.record
    if record.deadline_risk_told:
        return False
    running = record.state.running
    start = 0.0 if running is not None and running.mode is Mode.ON_DEMAND else record.job.cold_start_hours
    finish = at + start + left_share * pace.work_hours_bound
    if finish <= record.deadline_hours:
        return False
    record.deadline_risk_told = True
    # Its cause in the user's words: the work measured is more than declared, or (the pace as
    # declared) the hours preemptions, relaunches and a late controller already cost.
    cause = "slower work" if pace.slower_than_declared() is not None else "time lost"
    item = record.note(
        at, NoteKind.DEADLINE_RISK, finish_h=round(finish, 2), deadline_h=round(record.deadline_hours, 2), cause=cause
    )
    message = f"SkyNomad job {record.job_id}: {say(item)}"
    run.log.error("%s", message)
    call_deadline_risk(run.params.on_deadline_risk, record, run.task, message, run.log)
    return True


def learn_warmup(run, at: float, warmup: float | None) -> None:
    """A group took `warmup` hours from launch to its first checkpoint: plan later launches with the slowest."""
    record = run.record
    if warmup is None or record.progress_at_launch is None:
        return
    record.progress_at_launch = None
    record.warmups_hours = [*record.warmups_hours, round(warmup, 5)][-MAX_LAGS_KEPT:]
    moved = record.segments[-1].launch_delay_hours - record.job.cold_start_hours if record.segments else 0.0
    cold_start = warmup - max(0.0, moved)  # a checkpoint transfer is planned for separately
    if cold_start > record.job.cold_start_hours + 1e-6:
        record.job = replace(record.job, cold_start_hours=cold_start)
        run.say(record.note(at, NoteKind.SLOW_START, hours=round(cold_start, 3), declared=run.params.cold_start_hours))

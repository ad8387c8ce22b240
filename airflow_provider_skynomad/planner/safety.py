"""The deadline guarantee every policy shares: never take a step after which on-demand can no longer finish.

Decisions happen once per step and a spot group is only preempted at a step boundary
(the next observation), so the worst case after choosing option X now is: X makes this
step's progress, then is lost, and an on-demand group started at t + step (+ two of the
driver's reaction lags) must still finish, cold start included. An option is *safe* when that worst
case meets the deadline. When the job checkpoints periodically and a preemption leaves no
time for a final checkpoint, the worst case also loses the progress since the last one.
"""

from __future__ import annotations

import numpy as np

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState

EPS_HOURS = 1e-9


def checkpoint_market_at_change(job: JobSpec, state: JobState) -> str | None:
    """Where the checkpoint may be when a change decided now is carried out, a driver lag later.

    Until then the running group keeps running: one that gets past its warm-up within the lag
    writes the first checkpoint where it runs, so a launch elsewhere must then move it. Counting
    it there is the worst case (a group lost within the lag leaves none, and nothing moves).
    """
    running = state.running
    if state.checkpoint_market is None and running is not None and job.reaction_hours > state.warmup_left_hours:
        return running.market
    return state.checkpoint_market


def launch_delay_hours(job: JobSpec, state: JobState, view: MarketView, target: int) -> float:
    """Cold start (plus checkpoint transfer when the checkpoint lives elsewhere) of a new group in `target`."""
    source = checkpoint_market_at_change(job, state)
    return job.launch_hours(source is not None and source != view.keys[target])


def launch_delays_hours(job: JobSpec, state: JobState, view: MarketView) -> np.ndarray:
    """`launch_delay_hours` of a new group in every market."""
    source = checkpoint_market_at_change(job, state)
    moved = np.full(len(view.keys), source is not None)
    if source is not None:
        moved[view.index(source)] = False
    return np.where(moved, job.launch_hours(True), job.launch_hours(False))


def warmup_hours(job: JobSpec, state: JobState, view: MarketView, option: Option | None) -> float:
    """Cold start (and transfer) `option` still has to pay before it makes progress; 0 for idle."""
    if option is None:
        return 0.0
    if option == state.running:
        return state.warmup_left_hours
    return launch_delay_hours(job, state, view, view.index(option.market))


def step_progress_hours(job: JobSpec, state: JobState, view: MarketView, option: Option | None) -> float:
    """Progress `option` is guaranteed to make during the coming step."""
    if option is None:
        return 0.0
    return max(0.0, view.step_hours - warmup_hours(job, state, view, option))


def is_safe(job: JobSpec, state: JobState, view: MarketView, option: Option | None) -> bool:
    """Choosing `option` for this step still leaves an on-demand rescue that meets the deadline.

    With a driver lag (`job.reaction_hours`) a change starts that much late, and the rescue can
    come two lags late: this decision may be an event the worker carries out a lag late (a fallback
    to idle or to what runs included), and the next one, the rescue, another lag after that.
    """
    remaining = job.work_hours - state.progress_hours
    change = option is not None and option != state.running
    start = state.elapsed_hours + (job.reaction_hours if change else 0.0)
    warmup = warmup_hours(job, state, view, option)
    finish = start + warmup + remaining
    if option is not None and (option.mode is Mode.ON_DEMAND or finish <= start + view.step_hours):
        # On-demand is never lost, and a group that finishes within this step is not lost either:
        # either way it only has to finish in time itself.
        return finish <= job.deadline_hours + EPS_HOURS
    gain = step_progress_hours(job, state, view, option)
    after = remaining - gain
    # The rescue runs on-demand where the checkpoint then is, so it pays a cold start but no transfer,
    # and redoes what the lost group had not checkpointed yet (periodic checkpoints, no final one).
    rescue = after + unsaved_at_loss_hours(job, state, option, gain) + job.cold_start_hours
    return state.elapsed_hours + rescue_lead_hours(job, view) + rescue <= job.deadline_hours + EPS_HOURS


def unsaved_at_loss_hours(job: JobSpec, state: JobState, option: Option | None, gain_hours: float) -> float:
    """Progress a spot `option` would lose if preempted after this step's `gain_hours` (0 without loss)."""
    if option is None or option.mode is Mode.ON_DEMAND or not job.loses_work:
        return 0.0
    before = state.unsaved_hours if option == state.running else 0.0
    return job.unsaved_after(before, gain_hours)


def outlives_warmup(job: JobSpec, state: JobState, view: MarketView, option: Option | None) -> bool:
    """A spot group chosen now stays safe (`is_safe`) until its warm-up ends, so it can make progress.

    With a warm-up longer than a step, a launch that is safe now can be unsafe to keep at a later
    step of its warm-up: the net then drops it before it makes any progress, and its cold start
    bought nothing. The binding step is the one where the warm-up ends; its worst case is a rescue
    at t + warm-up (+ two lags) from the same progress. On-demand, idle and groups that finish
    within this step are never dropped by the net.
    """
    if option is None or option.mode is Mode.ON_DEMAND:
        return True
    warmup = warmup_hours(job, state, view, option)
    remaining = job.work_hours - state.progress_hours
    if warmup <= view.step_hours or warmup + remaining <= view.step_hours:
        return True
    late = state.elapsed_hours + warmup + 2.0 * job.reaction_hours + remaining + job.cold_start_hours
    return late <= job.deadline_hours + EPS_HOURS


def spare_slack_hours(job: JobSpec, state: JobState, view: MarketView) -> float:
    """Slack left for restarts: what remains after the net's own cold start and rescue lead (≥ 0).

    Each further restart spends about a cold start of it; policies that ration restarts divide
    this by what one costs them.
    """
    slack = job.deadline_hours - state.elapsed_hours - (job.work_hours - state.progress_hours)
    return max(slack - job.cold_start_hours - rescue_lead_hours(job, view), 0.0)


def slack_pays_fewer_starts(job: JobSpec, state: JobState, view: MarketView, starts: float) -> bool:
    """Whether the spare slack (`spare_slack_hours`) pays for fewer than `starts` cold starts: how the
    policies that ration restarts tell thin slack (never thin with no cold start to pay)."""
    return spare_slack_hours(job, state, view) < starts * job.cold_start_hours


def rescue_lead_hours(job: JobSpec, view: MarketView) -> float:
    """How long after now the on-demand rescue may start at the latest: one step, plus two driver lags."""
    return view.step_hours + 2.0 * job.reaction_hours


def cheapest_on_demand(job: JobSpec, state: JobState, view: MarketView) -> Option:
    """The safety-net target: minimise od_price·(P − p + d) + S·egress(checkpoint → z) (docs/planner.md)."""
    remaining = job.work_hours - state.progress_hours
    if state.running is not None and state.running.mode is Mode.ON_DEMAND:
        return state.running  # already on the net: moving would only add a cold start
    prices = view.on_demand_usd_per_hour * job.instances
    cost = prices * (remaining + job.cold_start_hours)
    checkpoint = checkpoint_market_at_change(job, state)
    if checkpoint is not None:
        source = view.index(checkpoint)
        cost = cost + job.checkpoint_gb * view.egress_usd_per_gb[source]
        if job.bandwidth_gb_per_hour:
            # A transfer also costs time; keep zones whose delay still meets the deadline (the launch
            # itself is a change, carried out a driver lag late, when the checkpoint may be where
            # the running group wrote it meanwhile).
            delay = launch_delays_hours(job, state, view)
            late = state.elapsed_hours + job.reaction_hours + delay + remaining > job.deadline_hours + EPS_HOURS
            cost = np.where(late & (np.arange(len(cost)) != source), np.inf, cost)
    return Option(view.keys[_cheapest_with_spot_at_hand(cost, view)], Mode.ON_DEMAND)


def _cheapest_with_spot_at_hand(cost: np.ndarray, view: MarketView) -> int:
    """The cheapest zone; among zones tied on cost, the one with the cheapest spot market.

    A job on the net leaves it for spot when a cheap market comes back; from the tied zone whose
    own spot market is cheapest that return needs no checkpoint move, so the tie costs nothing
    to break this way (same-region zones tie exactly on on-demand price).
    """
    best = float(np.min(cost))
    tied = np.flatnonzero(cost <= best + 1e-9 * max(1.0, abs(best)))
    if len(tied) == 1:
        return int(tied[0])
    spot = view.spot_usd_per_hour[tied]
    return int(tied[np.argmin(np.where(np.isfinite(spot), spot, np.inf))])

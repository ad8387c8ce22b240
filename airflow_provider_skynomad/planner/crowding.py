"""The spot capacity left to one job when its own deployment's other jobs hold some of it (market.fleet).

Three facts a fleet-aware planner prices, all from the view's history and the fleet's rows:

- **Left now.** A launch gets capacity only if ``available − held ≥ gang`` (market.capacity). The
  capacity is the market's observation at this step; a market the job has not observed since is
  unknown, and worth a free try, as without a fleet (`_capacity`); the holdings are the others'
  rows. A market whose left is short of the gang is not launchable now, so the job does not plan
  on it. An observation one step old is not taken as now (`FRESH_STEPS`): a refused launch shows
  the market full at its step, and by the next one the fleet's finished or preempted groups may
  have freed it; another refused try costs nothing. Nor is an old observation a guess at now: a
  job on on-demand observes no spot market, so one it last saw down would stay "down" to it after
  it came back (at AWS N = 50 that kept half the on-demand the fleet bought beside free spot,
  benchmarks/results/fleet.md, E73).
- **Crowded lifetime.** Under the youngest-first rule a group keeps its capacity only while the
  market has room for every older group *and* it: a new group, the youngest, lives while
  ``available ≥ held + gang``. Its expected stay is the trace's stay scaled by the ratio of mean
  up-runs of that series to the plain ``available ≥ gang`` one over recent history (the others'
  holdings taken as they are now). A running group counts only the groups older than it.
- **Crowded supply.** Over the rest of the job a market supplies this job only the time it has
  room for it after the others: its long-run up share is scaled by the share of recent history
  with ``available ≥ held + gang`` over the share with ``available ≥ gang``, and never above
  the fleet's share: the gangs the markets hold on average over recent history ÷ the gangs
  that want spot (the others holding or waiting, and this job). A market down now and held by
  no one is no reserve when the whole fleet waits for it. The value of
  progress (planner.progress.supply_price) then counts on the spot the job can get, not on what
  the trace shows every job: a job that believes in spot its fleet holds leaves on-demand to
  wait for it, and pays a cold start to come back each time the wait runs out.
- **Yielding.** A job leaves a market to other jobs with less slack that wait for it (their
  "waiting" claims): their counts come off what is left to it. The job with least slack takes
  the scarce market first; one with more slack can wait for the next that frees.
- **On-demand waits for thin slack.** A job launches on-demand (outside the safety net) only
  once its spare slack (planner.safety.spare_slack_hours) is below `ON_DEMAND_RESERVE_STARTS`
  cold starts. The fleet's capacity is crowded while its jobs overlap and frees as the jobs with
  earlier deadlines finish; on-demand bought while the job still has slack to wait is bought
  beside spot that frees before its deadline, and the job then finishes early and leaves that
  spot unused. A job alone never reads this; its value of progress decides as before. The
  reserve it keeps lets it leave on-demand for spot that frees later (planner.payback permitting),
  but only for a stay expected to last `THIN_HOP_STAY_HOURS`: each hop spends a cold start of the
  few the reserve pays for, and in the crowded hours a third of the hops from on-demand were lost
  within their cold start; a job that spent its reserve there reaches the last day on the safety
  net, on on-demand beside the spot its fleet's finished jobs left. A job whose remaining work (its
  launch included) is shorter than that needs only a stay that lasts to its end
  (`thin_hop_stay_hours`): a stay that finishes the job is followed by no hop and spends no more
  of the reserve than its own cold start. Nor does it hop into a market it saw down within the
  last `THIN_HOP_SETTLE_HOURS` (`just_back`): a spell that has just begun is the likeliest to end
  within the cold start (AWS N = 50: hops from on-demand into a market seen down 0.1 h before
  stayed 0.4 h (median), the others 1.5 h, against a forecast of 2 h for both).

All of it is off when the view has no fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.safety import launch_delays_hours, slack_pays_fewer_starts

HISTORY_HOURS = 48.0  # recent history the crowded lifetime ratio is measured over
ON_DEMAND_RESERVE_STARTS = 5.0  # in a fleet, on-demand opens when spare slack pays for fewer cold starts than this
THIN_HOP_STAY_HOURS = 2.0  # then an on-demand group is left only for a spot stay expected to last this long
THIN_HOP_SETTLE_HOURS = 0.5  # ... and not for a market the job saw down this recently
FRESH_STEPS = 1  # a market's observed count stands for its capacity now only from this many latest steps


@dataclass(frozen=True)
class Crowding:
    """Per market of the view: what is left to this job, whether it may launch there, its stay's share."""

    left: np.ndarray  # instances left to this job now (last seen capacity − others' holdings − claims it yields to)
    launchable: np.ndarray  # left ≥ gang, or this job's own running spot market
    lifetime_share: np.ndarray  # [0, 1]: a group's expected stay there ÷ the trace's (youngest-first)
    up_share: np.ndarray  # [0, 1]: the share of time the market has room for this job ÷ the trace's
    on_demand_open: bool = True  # the job's spare slack is thin: on-demand may be launched (module docstring)


def slack_hours(job: JobSpec, state: JobState) -> float:
    """Deadline − now − remaining work: what the fleet compares when one job yields to another."""
    return job.deadline_hours - state.elapsed_hours - (job.work_hours - state.progress_hours)


def crowding(job: JobSpec, state: JobState, view: MarketView, history_hours: float = HISTORY_HOURS) -> Crowding:
    """What the view's fleet leaves to this job (the view must have one)."""
    fleet = view.fleet
    if fleet is None:
        raise ValueError("crowding needs a view with a fleet (market.fleet); without one the job is alone")
    n = job.instances
    available, seen = view.available_history(history_hours)
    capacity = _capacity(available, seen)
    held = fleet.held
    ahead = held.astype(float)  # what comes before a new group, in the youngest-first order
    yielded = fleet.waited_for(slack_hours(job, state))
    left = capacity - held - yielded
    launchable = left >= n
    running = state.running
    if running is not None and running.mode is Mode.SPOT:
        i = view.index(running.market)
        launchable[i] = True
        ahead[i] = fleet.held_before(i, fleet.own_since)
    share, up = np.ones(len(view.keys)), np.ones(len(view.keys))
    for i in np.flatnonzero(ahead > 0):
        column = available[seen[:, i], i]
        plain, crowded = column >= n, column >= ahead[i] + n
        if plain.any():
            share[i] = _mean_up_run(crowded) / _mean_up_run(plain)
            up[i] = np.count_nonzero(crowded) / np.count_nonzero(plain)
    gangs = float(np.nansum(_mean_seen(available // n, seen)))
    fleet_share = min(1.0, gangs / (1.0 + fleet.wanting_spot / n))
    up = np.minimum(up, fleet_share)
    thin = slack_pays_fewer_starts(job, state, view, ON_DEMAND_RESERVE_STARTS)
    return Crowding(left, launchable, np.clip(share, 0.0, 1.0), np.clip(up, 0.0, 1.0), thin)


def thin_hop_stay_hours(job: JobSpec, state: JobState, view: MarketView) -> np.ndarray:
    """Per market: the expected stay a thin-slack job on on-demand needs to leave for spot there.

    `THIN_HOP_STAY_HOURS`, or the rest of the job where that is shorter: the remaining work plus
    the launch's cold start (and transfer, when the checkpoint must move). A group expected to
    stay that long finishes the job where it lands (planner.payback charges it no next start).
    """
    rest = job.work_hours - state.progress_hours + launch_delays_hours(job, state, view)
    return np.minimum(THIN_HOP_STAY_HOURS, rest)


def just_back(view: MarketView) -> np.ndarray:
    """Per market: the job saw it without capacity for its gang within the last `THIN_HOP_SETTLE_HOURS`."""
    age_ticks, was_up = view.last_seen
    return ~was_up & (age_ticks * view.step_hours <= THIN_HOP_SETTLE_HOURS + 1e-9)


def _capacity(available: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Per market: the count seen in the last `FRESH_STEPS` steps (this one), else inf (not observed since: a
    free try tells)."""
    rows = seen.shape[0]
    last = rows - 1 - np.argmax(seen[::-1], axis=0)
    fresh = seen.any(axis=0) & (last >= rows - FRESH_STEPS)
    counts = available[last, np.arange(seen.shape[1])].astype(float)
    return np.where(fresh, counts, np.inf)


def _mean_seen(available: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Per market: the mean over observed cells (nan where never seen)."""
    counts = seen.sum(axis=0)
    total = np.where(seen, available, 0).sum(axis=0)
    return np.divide(total, counts, out=np.full(len(counts), np.nan), where=counts > 0)


def _mean_up_run(up: np.ndarray) -> float:
    """Mean length (in observations) of the runs of True; 0 when there are none."""
    if not up.any():
        return 0.0
    starts = int(up[0]) + int(np.count_nonzero(up[1:] & ~up[:-1]))
    return float(np.count_nonzero(up)) / starts

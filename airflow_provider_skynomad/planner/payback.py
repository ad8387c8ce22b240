"""Does a launch pay for itself? The restart its stay's end brings, priced against what it gains.

Utility (planner.utility) prices a launch's own cold start (η) and its egress, but not what
happens when its stay ends before the job does: the job must launch again, and pays another
cold start at the price of what it launches next. Over a short expected stay that second start
is what decides. A job on on-demand that leaves for a spot group lasting 20 minutes pays a spot
cold start, makes a few minutes of progress, and pays an on-demand cold start to come back: a
round trip that costs more than staying put.

So a launch that leaves a running group for a new spot group whose expected stay (this
market's lifetime forecast from now, at the age a new group has, with the recent preemptions the
forecast weighs and, in a fleet, the share of it the youngest-first rule leaves this job) ends
before the remaining work does is charged, per hour of that stay, the cold start of the launch
that follows:

    U_paid = U − d · p_next / L̄

with p_next the price of what it comes back to: the on-demand group, or the spot group it moved
from. A stay expected to cover the rest of the job pays no second start: a job that can finish
where it lands does not come back. A launch from idle leaves nothing and is charged nothing:
waiting pays a start too. The launch is tried only when U_paid still beats staying by the usual
margin; otherwise the planner declines it and says why.

The charge applies in a fleet, where the capacity a job finds is its fleet's and coming back to
on-demand is what a lost group leads to. A job alone is not charged it: it relaunches on spot it
finds again, and on the single-job rows (benchmarks/bench_payback.py) even a charge at the
price of a spot market seen up lately made rows dearer. Stopping an
on-demand group (`stop_pays`) is weighed the same way alone and in a fleet.

In a fleet, an on-demand group is not stopped to wait at all (`keeps_on_demand`): the job leaves
it only for a spot launch that pays as above. A job that stops on-demand to wait for spot waits
for capacity its fleet is waiting for too; what it then gets is mostly its way back to on-demand,
with another cold start (at GCP N = 200, 630 on-demand → idle → on-demand round trips, the
idle median half an hour). A job that can finish where it runs stays there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.safety import spare_slack_hours
from airflow_provider_skynomad.planner.utility import Scored

EPS_HOURS = 1e-9
RECENT_HOURS = 2.0  # a spot market seen up this recently is where a job alone relaunches next


@dataclass(frozen=True)
class Payback:
    """One launch weighed: its utility with the next start charged, against the bar it must beat."""

    option: Option
    utility_usd_per_hour: float  # U − d·p_next/L̄
    bar_usd_per_hour: float
    stay_hours: float
    next_start_usd: float  # d · p_next, 0 when the stay is expected to last to the end
    plain_usd_per_hour: float  # U without the next start

    @property
    def pays(self) -> bool:
        return self.utility_usd_per_hour > self.bar_usd_per_hour

    def words(self) -> str:
        """Plain words for the log: what was declined and why."""
        return (
            f"not launching spot in {self.option.market}: a group there is not expected to stay long enough "
            "to pay for its cold start and the restart after it"
        )

    def numbers(self) -> str:
        return (
            f"{self.option}: U with next start {self.utility_usd_per_hour:.2f} $/h <= bar {self.bar_usd_per_hour:.2f}"
            f" (stay {self.stay_hours:.2f} h, next start ${self.next_start_usd:.2f})"
        )


def next_start_usd(job: JobSpec, state: JobState, view: MarketView, candidate: Scored) -> float:
    """The cold start the job pays after `candidate`'s stay ends, if it leaves a running group for it and the
    stay is expected to end before the work does; 0 otherwise."""
    option, running = candidate.option, state.running
    if running is None or option is None or option.mode is not Mode.SPOT or option == running:
        return 0.0
    if view.fleet is None:
        return 0.0  # alone: see the module docstring
    remaining = job.work_hours - state.progress_hours
    left = remaining + job.launch_hours(state.moves_checkpoint(option.market))
    if candidate.stay_hours >= left - EPS_HOURS:
        return 0.0  # it is expected to finish the job where it lands
    return job.cold_start_hours * next_price_usd_per_hour(job, state, view)


def next_price_usd_per_hour(job: JobSpec, state: JobState, view: MarketView) -> float:
    """The price of the launch that follows when the running group is given up: where the job goes then.

    In a fleet the job comes back to what it leaves (the capacity it could find is its fleet's).
    Alone, a spot market seen with capacity in the last `RECENT_HOURS` is where it would go next
    if it is cheaper than what it leaves; with none, it comes back to what it leaves.
    """
    running = state.running
    prices = view.spot_usd_per_hour if running.mode is Mode.SPOT else view.on_demand_usd_per_hour
    back = float(prices[view.index(running.market)])
    if view.fleet is None:
        recent = view.usable_within(RECENT_HOURS) & np.isfinite(view.spot_usd_per_hour)
        back = min(back, float(np.min(view.spot_usd_per_hour[recent], initial=np.inf)))
    return back * job.instances


def weigh(job: JobSpec, state: JobState, view: MarketView, candidate: Scored, bar_usd_per_hour: float) -> Payback:
    """`candidate` (a scored option) against `bar_usd_per_hour` with the next start charged over its stay."""
    restart = next_start_usd(job, state, view, candidate)
    stay = candidate.stay_hours
    utility = candidate.utility_usd_per_hour - (restart / stay if stay > 0 else (np.inf if restart else 0.0))
    return Payback(candidate.option, float(utility), bar_usd_per_hour, stay, restart, candidate.utility_usd_per_hour)


def stop_pays(job: JobSpec, state: JobState, view: MarketView, gain_usd_per_hour: float, margin: float) -> bool:
    """Stopping an on-demand group to wait pays only if what the wait saves covers starting it again.

    The wait saves `gain_usd_per_hour` (what the group costs beyond its progress's worth) for at
    most the slack left for restarts (planner.safety.spare_slack_hours); a job that then comes back
    pays a cold start again (at `next_price_usd_per_hour`). A stop that cannot save that much is a
    round trip.
    Spot groups are not held to this: they are lost anyway sooner or later.
    """
    running = state.running
    if running is None or running.mode is not Mode.ON_DEMAND:
        return gain_usd_per_hour > margin
    restart = job.cold_start_hours * next_price_usd_per_hour(job, state, view)
    return gain_usd_per_hour > margin and gain_usd_per_hour * spare_slack_hours(job, state, view) > restart


def keeps_on_demand(state: JobState, view: MarketView) -> bool:
    """In a fleet, a running on-demand group is kept until a spot launch that pays replaces it."""
    return view.fleet is not None and state.running is not None and state.running.mode is Mode.ON_DEMAND

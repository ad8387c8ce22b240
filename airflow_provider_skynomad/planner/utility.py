"""Utility of running an option for the next while: U = V·η − price − S·egress/L̄ (DESIGN §2).

V is what an hour of progress is worth now, η the share of the expected stay that is
useful (the rest is cold start), and egress is amortised over that stay. Idle is worth 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..market.view import MarketView
from .actions import Mode, Option
from .job import JobSpec, JobState
from .safety import launch_delay_hours


@dataclass(frozen=True)
class Scored:
    option: Option | None
    utility_usd_per_hour: float
    stay_hours: float  # L̄: expected stay (spot lifetime, or the rest of the job on-demand)
    useful_share: float = 1.0  # η: share of the stay that makes progress
    cost_usd_per_hour: float = 0.0  # price + amortised egress, per hour of stay

    @property
    def cost_per_progress_hour(self) -> float:
        """What an hour of progress costs on this option: (price + egress/L̄) / η."""
        return self.cost_usd_per_hour / self.useful_share if self.useful_share > 0 else float("inf")


def score(
    job: JobSpec,
    state: JobState,
    view: MarketView,
    option: Option,
    value_usd_per_hour: float,
    spot_lifetime_hours: float,
    on_demand_stay_hours: float | None = None,
    residency_hours: float = 0.0,
) -> Scored:
    """U of `option`; staying on the running group pays neither cold start nor egress.

    An on-demand group is never preempted, but a planner that leaves it as soon as spot
    returns will not keep it to the end: `on_demand_stay_hours` (default: the rest of the
    job) is the stay its cold start and egress are spread over.

    Egress is paid once per move, not once per stay: after a preemption the job usually
    relaunches where its checkpoint is, so a move's egress is spread over the longer of the
    stay and `residency_hours` (how long the checkpoint is expected to stay put), within the
    remaining work.
    """
    i = view.index(option.market)
    remaining = job.work_hours - state.progress_hours
    staying = option == state.running
    delay = state.warmup_left_hours if staying else launch_delay_hours(job, state, view, i)
    if option.mode is Mode.ON_DEMAND:
        price = view.on_demand_usd_per_hour[i] * job.instances
        stay = remaining + delay if on_demand_stay_hours is None else min(on_demand_stay_hours, remaining + delay)
    else:
        price = view.spot_usd_per_hour[i] * job.instances
        stay = min(spot_lifetime_hours, remaining + delay)
    if stay <= 0 or not math.isfinite(price):
        return Scored(option, -math.inf, 0.0)
    useful = max(stay - delay, 0.0) / stay
    egress = 0.0
    if not staying and state.checkpoint_market is not None:
        egress = job.checkpoint_gb * view.egress_usd_per_gb[view.index(state.checkpoint_market), i]
    horizon = max(stay, min(residency_hours, remaining + delay))
    cost = price + egress / horizon
    return Scored(option, value_usd_per_hour * useful - cost, stay, useful, cost)


def migration_pays(job: JobSpec, view: MarketView, source: str, target: str, target_lifetime_hours: float) -> bool:
    """Price-aware migration: S·egress(a→b) ≤ (price_a − price_b)·(L̄_b − d), L̄_b being the horizon used for egress."""
    a, b = view.index(source), view.index(target)
    saving = (view.spot_usd_per_hour[a] - view.spot_usd_per_hour[b]) * job.instances
    egress = job.checkpoint_gb * view.egress_usd_per_gb[a, b]
    return egress <= saving * max(target_lifetime_hours - job.cold_start_hours, 0.0)

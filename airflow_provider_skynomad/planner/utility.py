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


def score(
    job: JobSpec,
    state: JobState,
    view: MarketView,
    option: Option,
    value_usd_per_hour: float,
    spot_lifetime_hours: float,
) -> Scored:
    """U of `option`; staying on the running group pays neither cold start nor egress."""
    i = view.index(option.market)
    remaining = job.work_hours - state.progress_hours
    staying = option == state.running
    delay = state.warmup_left_hours if staying else launch_delay_hours(job, state, view, i)
    if option.mode is Mode.ON_DEMAND:
        price = view.on_demand_usd_per_hour[i] * job.instances
        stay = remaining + delay  # never preempted: it stays until the job ends
    else:
        price = view.spot_usd_per_hour[i] * job.instances
        stay = min(spot_lifetime_hours, remaining + delay)
    if stay <= 0 or not math.isfinite(price):
        return Scored(option, -math.inf, 0.0)
    useful = max(stay - delay, 0.0) / stay
    egress = 0.0
    if not staying and state.checkpoint_market is not None:
        egress = job.checkpoint_gb * view.egress_usd_per_gb[view.index(state.checkpoint_market), i]
    return Scored(option, value_usd_per_hour * useful - price - egress / stay, stay)


def migration_pays(job: JobSpec, view: MarketView, source: str, target: str, target_lifetime_hours: float) -> bool:
    """Price-aware migration: S·egress(a→b) ≤ (price_a − price_b)·(L̄_b − d)."""
    a, b = view.index(source), view.index(target)
    saving = (view.spot_usd_per_hour[a] - view.spot_usd_per_hour[b]) * job.instances
    egress = job.checkpoint_gb * view.egress_usd_per_gb[a, b]
    return egress <= saving * max(target_lifetime_hours - job.cold_start_hours, 0.0)

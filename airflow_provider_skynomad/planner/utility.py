"""Utility of running an option for the next while: U = V·η − price − S·egress/L̄ (docs/planner.md).

V is what an hour of progress is worth now, η the share of the expected stay that is
useful (the rest is cold start, and with periodic checkpoints the work a preemption takes back),
and egress is amortised over that stay. Idle is worth 0.
Every option is scored at once as arrays (markets × modes): a decision scores all of them
each step, and one vectorised pass keeps that well inside the latency budget at 200 options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.safety import launch_delays_hours

MODES = (Mode.SPOT, Mode.ON_DEMAND)  # column order of `Scores`


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


@dataclass(frozen=True)
class Scores:
    """Every option's terms as (markets × MODES) arrays; U(V) = V·useful − cost, −inf where not launchable.

    U is linear in V, so one scoring serves any V the planner settles on afterwards.
    """

    keys: list[str]
    stay_hours: np.ndarray
    useful_share: np.ndarray
    cost_usd_per_hour: np.ndarray
    valid: np.ndarray

    def utility(self, value_usd_per_hour: float) -> np.ndarray:
        return np.where(self.valid, value_usd_per_hour * self.useful_share - self.cost_usd_per_hour, -np.inf)

    def cost_per_progress_hour(self, mode: Mode) -> np.ndarray:
        """(price + egress/L̄) / η per market in `mode`; inf where nothing useful is bought."""
        j = MODES.index(mode)
        useful = self.useful_share[:, j]
        return np.divide(self.cost_usd_per_hour[:, j], useful, out=np.full(useful.shape, np.inf), where=useful > 0)

    def cell(self, option: Option) -> tuple[int, int]:
        return self.keys.index(option.market), MODES.index(option.mode)

    def scored(self, option: Option, value_usd_per_hour: float, cell: tuple[int, int] | None = None) -> Scored:
        i, j = cell if cell is not None else self.cell(option)
        if not self.valid[i, j]:
            return Scored(option, -math.inf, 0.0)
        useful, cost = float(self.useful_share[i, j]), float(self.cost_usd_per_hour[i, j])
        return Scored(option, value_usd_per_hour * useful - cost, float(self.stay_hours[i, j]), useful, cost)


def score_all(
    job: JobSpec,
    state: JobState,
    view: MarketView,
    spot_lifetime_hours: np.ndarray,
    on_demand_stay_hours: float | None = None,
    residency_hours: np.ndarray | float = 0.0,
) -> Scores:
    """Every option's U terms; staying on the running group pays neither cold start nor egress.

    An on-demand group is never preempted, but a planner that leaves it as soon as spot
    returns will not keep it to the end: `on_demand_stay_hours` (default: the rest of the
    job) is the stay its cold start and egress are spread over.

    Egress is paid once per move, not once per stay: after a preemption the job usually
    relaunches where its checkpoint is, so a move's egress is spread over the longer of the
    stay and `residency_hours` (per market × mode: how long the checkpoint is expected to
    stay put there), within the remaining work.
    """
    n = len(view.keys)
    remaining = job.work_hours - state.progress_hours
    delay = np.repeat(launch_delays_hours(job, state, view)[:, None], 2, axis=1)
    price = np.stack([view.spot_usd_per_hour, view.on_demand_usd_per_hour], axis=1) * job.instances
    egress = np.zeros((n, 2))
    if state.checkpoint_market is not None:
        egress += (job.checkpoint_gb * view.egress_usd_per_gb[view.index(state.checkpoint_market)])[:, None]
    if state.running is not None:
        here = view.index(state.running.market), MODES.index(state.running.mode)
        delay[here], egress[here] = state.warmup_left_hours, 0.0
    left = remaining + delay
    spot = np.minimum(np.asarray(spot_lifetime_hours, dtype=float), left[:, 0])
    od = left[:, 1] if on_demand_stay_hours is None else np.minimum(on_demand_stay_hours, left[:, 1])
    stay = np.stack([spot, od], axis=1)
    valid = (stay > 0) & np.isfinite(price)
    safe_stay = np.where(valid, stay, 1.0)
    lost = np.zeros((n, 2))
    if job.loses_work:
        # A spot stay that ends in a preemption loses about half an interval (or half of what it made).
        ends_preempted = spot < left[:, 0]
        made = np.maximum(spot - delay[:, 0], 0.0)
        lost[:, 0] = np.where(ends_preempted, np.minimum(job.checkpoint_interval_hours, made) / 2.0, 0.0)
    useful = np.where(valid, np.maximum(stay - delay - lost, 0.0) / safe_stay, 0.0)
    horizon = np.maximum(safe_stay, np.minimum(residency_hours, left))
    cost = np.where(valid, price + egress / horizon, np.inf)
    return Scores(view.keys, np.where(valid, stay, 0.0), useful, cost, valid)


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
    """U of one `option` (see `score_all`), with `spot_lifetime_hours` its market's forecast."""
    lifetimes = np.full(len(view.keys), float(spot_lifetime_hours))
    scores = score_all(job, state, view, lifetimes, on_demand_stay_hours, residency_hours)
    return scores.scored(option, value_usd_per_hour)


def migration_pays(job: JobSpec, view: MarketView, source: str, target: str, target_lifetime_hours: float) -> bool:
    """Price-aware migration: S·egress(a→b) ≤ (price_a − price_b)·(L̄_b − d), L̄_b being the horizon used for egress."""
    a, b = view.index(source), view.index(target)
    saving = (view.spot_usd_per_hour[a] - view.spot_usd_per_hour[b]) * job.instances
    egress = job.checkpoint_gb * view.egress_usd_per_gb[a, b]
    return egress <= saving * max(target_lifetime_hours - job.cold_start_hours, 0.0)

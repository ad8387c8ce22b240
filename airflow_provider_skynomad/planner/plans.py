"""Lookahead: what the rest of the job costs if it makes a market its home from now on.

A plan "home z" runs spot in z whenever z has capacity, waits when it has not, and leaves
the work it cannot finish in time to the on-demand safety net. With z's mean up spell U and
down spell D (forecasts.renewal), the W hours of work left see about n = W/U preemptions,
each costing a cold start d and a wait of D. The plan's time is therefore
E = first wait + setup + W + n(D + d), plus one standard deviation for bad luck; the share of
the work that does not fit before the safety net must take over is bought on-demand.
The per-stay utility (planner.utility) cannot see this: it amortises a move over one
expected stay, so a cheaper market with short outages never looks worth moving back to.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from airflow_provider_skynomad.forecasts.renewal import Spells
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.safety import launch_delays_hours, rescue_lead_hours


class Plans(NamedTuple):
    cost_usd: np.ndarray  # expected cost of the rest of the job, per home market
    fits: np.ndarray  # the plan finishes on spot before the safety net would take over, with one σ to spare


def spot_plans(job: JobSpec, state: JobState, view: MarketView, spells: Spells, wait_hours: np.ndarray) -> Plans:
    """Every market as home for the rest of the job, its first launch `wait_hours` from now."""
    n_markets = len(view.keys)
    work = job.work_hours - state.progress_hours
    if work <= 0:
        return Plans(np.zeros(n_markets), np.ones(n_markets, dtype=bool))
    d = job.cold_start_hours
    setup = launch_delays_hours(job, state, view)
    egress = np.zeros(n_markets)
    if state.checkpoint_market is not None:
        egress = job.checkpoint_gb * view.egress_usd_per_gb[view.index(state.checkpoint_market)]
    if state.running is not None and state.running.mode is Mode.SPOT:
        here = view.index(state.running.market)
        setup[here], egress[here] = state.warmup_left_hours, 0.0

    up, down = spells.up_hours, spells.down_hours
    preemptions = work / up
    lost = down + d
    busy = work + preemptions * lost + np.sqrt(preemptions * (lost**2 + down**2))  # mean + one σ
    # Spot must leave room for the on-demand rescue: one step (and the driver's lag), then a cold start.
    room = job.deadline_hours - state.elapsed_hours - wait_hours - setup - d - rescue_lead_hours(job, view)
    share = np.clip(room / busy, 0.0, 1.0)  # of the remaining work done on spot
    spot = view.spot_usd_per_hour * job.instances
    on_demand = float(np.min(view.on_demand_usd_per_hour)) * job.instances
    cost = egress + spot * (setup + share * (work + preemptions * d))
    cost = cost + np.where(share < 1.0, on_demand * ((1.0 - share) * work + d), 0.0)
    return Plans(cost, share >= 1.0)

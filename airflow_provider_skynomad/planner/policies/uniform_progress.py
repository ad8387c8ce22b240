"""Uniform progress (Can't Be Late, single zone) and its multi-zone SkyPilot-style failover variant.

Both follow the same rules (docs/planner.md): spot whenever it launches, kept until preempted;
on-demand when idle and behind the uniform line p < P·t/T, kept until p ≥ P·(t + 2d)/T;
on-demand to the end once T − t < P − p + 2d. They differ only in where spot is tried.
"""

from __future__ import annotations

import numpy as np

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.progress import behind_uniform_line
from airflow_provider_skynomad.planner.safety import cheapest_on_demand, is_safe


class UniformProgressPolicy:
    """Spot and on-demand in `zones`; with one zone this is Can't Be Late's uniform progress."""

    name = "uniform-progress"

    def __init__(self, zone: str | None = None):
        self.zone = zone

    def spot_order(self, job: JobSpec, state: JobState, view: MarketView) -> list[str]:
        """Markets to try for spot, best first."""
        return [self.zone] if self.zone else []

    def on_demand_option(self, job: JobSpec, state: JobState, view: MarketView) -> Option:
        """On-demand in the policy's zone; while that zone has no observed price yet, the cheapest known."""
        if self.zone and np.isfinite(view.on_demand_usd_per_hour[view.index(self.zone)]):
            return Option(self.zone, Mode.ON_DEMAND)
        return cheapest_on_demand(job, state, view)

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        current = state.running
        margin = 2 * job.cold_start_hours
        slack = job.deadline_hours - now - (job.work_hours - state.progress_hours)
        if current is not None and current.mode is Mode.ON_DEMAND:
            committed = slack < margin + view.step_hours
            if committed or behind_uniform_line(job, state, lead_hours=margin):
                return Decision((current,), reason="on-demand until ahead of the uniform line")
        elif current is not None:
            if is_safe(job, state, view, current):
                return Decision((current,), reason="spot until preempted")
            return Decision((self.on_demand_option(job, state, view),), reason="safety net")
        # Idle (or leaving on-demand): the safety net also covers the decision-step granularity.
        on_demand = self.on_demand_option(job, state, view)
        if slack < margin or not is_safe(job, state, view, IDLE):
            return Decision((on_demand,), reason="safety net: on-demand to the end")
        spots = [Option(m, Mode.SPOT) for m in self.spot_order(job, state, view)]
        spots = [o for o in spots if is_safe(job, state, view, o)]
        fallback = on_demand if behind_uniform_line(job, state) else IDLE
        return Decision((*spots, fallback), reason="uniform progress")


class EagerFailoverPolicy(UniformProgressPolicy):
    """SkyPilot EAGER_NEXT_REGION + uniform progress: after a preemption, cheapest spot first, preempted region last."""

    name = "eager-failover"

    def __init__(self):
        super().__init__(zone=None)

    def spot_order(self, job: JobSpec, state: JobState, view: MarketView) -> list[str]:
        prices = view.spot_usd_per_hour
        order = sorted(range(len(prices)), key=lambda i: prices[i])
        keys = [view.keys[i] for i in order]
        if state.last_preempted_market is not None:
            region = view.markets[view.index(state.last_preempted_market)].region
            keys.sort(key=lambda k: view.markets[view.index(k)].region == region)  # stable: keeps price order
        return keys

"""Baseline: the cheapest on-demand zone from start to end."""

from __future__ import annotations

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.safety import cheapest_on_demand


class OnDemandPolicy:
    name = "on-demand"

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        return Decision((cheapest_on_demand(job, state, view),), reason="on-demand baseline")

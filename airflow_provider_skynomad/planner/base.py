"""The one interface every policy implements; the simulator, the trigger and the tests call it."""

from __future__ import annotations

from typing import Protocol

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision
from airflow_provider_skynomad.planner.job import JobSpec, JobState


class Policy(Protocol):
    """`decide` is a pure function of its arguments (policies may cache, never remember)."""

    name: str

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        """Choose what to run for the next decision step; `now` is hours since the job started."""
        ...

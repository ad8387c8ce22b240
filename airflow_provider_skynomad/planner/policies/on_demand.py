"""Baseline: the cheapest on-demand zone from start to end."""

from __future__ import annotations

from ...market.view import MarketView
from ..actions import Decision
from ..job import JobSpec, JobState
from ..safety import cheapest_on_demand


class OnDemandPolicy:
    name = "on-demand"

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        return Decision((cheapest_on_demand(job, state, view),), reason="on-demand baseline")

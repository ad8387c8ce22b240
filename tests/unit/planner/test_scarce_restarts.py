"""`scarce_restarts_cap_hours`: a longer lifetime cap only while the slack pays for too few restarts."""

from __future__ import annotations

import numpy as np
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy


def view_at(tick: int = 30) -> MarketView:
    available = np.ones((80, 2), bool)
    grid = make_grid(available, [1.0, 1.2], [6.0, 6.0])
    return MarketView(grid, tick, 1, np.ones((80, 2), bool), flat_egress(2))


def test_the_longer_cap_is_used_only_when_restarts_cannot_cover_the_work():
    policy = SkyNomadPolicy(scarce_restarts_cap_hours=12.0)
    view = view_at()
    job = JobSpec(work_hours=10.0, deadline_hours=12.0, cold_start_hours=0.2)
    # 2 h of slack at the start: (2 − 0.2 − 1/6) ÷ 0.2 ≈ 8 restarts × 4 h ≥ 10 h of work: not scarce.
    assert policy._lifetimes_for(job, JobState(), view) is policy.lifetimes
    # 0.6 h of slack left with 8 h of work to go: 1 restart × 4 h < 8 h: scarce.
    late = JobState(elapsed_hours=3.4, progress_hours=2.0)
    assert policy._lifetimes_for(job, late, view) is policy.scarce
    assert policy.scarce.cap_hours == 12.0


def test_off_by_default_and_the_same_decisions_then():
    view = view_at()
    job = JobSpec(work_hours=10.0, deadline_hours=12.0, cold_start_hours=0.2)
    late = JobState(elapsed_hours=3.4, progress_hours=2.0)
    default = SkyNomadPolicy()
    assert default.scarce is None and default._lifetimes_for(job, late, view) is default.lifetimes
    assert default.decide(job, late, view, 3.4) == SkyNomadPolicy(scarce_restarts_cap_hours=None).decide(
        job, late, view, 3.4
    )

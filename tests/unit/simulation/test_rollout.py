"""A rollout is the simulator's own loop started from a job already under way."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.simulator import rollout, simulate


def flaky(ticks: int = 140):
    up = np.ones((ticks, 3), bool)
    up[40:55, 0] = False
    up[70:75, 1] = False
    up[90:130, 0] = False
    return make_grid(up, [1.0, 1.4, 2.0], 6.0)


@pytest.mark.parametrize("name", ["skynomad", "eager-failover", "on-demand"])
def test_a_rollout_from_the_start_is_the_simulated_run(name):
    grid, egress = flaky(), flat_egress(3)
    job = JobSpec(work_hours=12.0, deadline_hours=16.0, cold_start_hours=0.2, checkpoint_gb=10)
    seen = np.zeros(grid.available.shape, bool)
    seen[:20] = True  # the market table's history before the window, as simulate shows it
    whole = simulate(get_policy(name), job, grid, 20, egress)
    part = rollout(get_policy(name), job, grid, 20, JobState(), seen, egress)
    assert part.cost_usd == pytest.approx(whole.cost_usd)
    assert [(s.option, s.start_hours, s.ended_by) for s in part.segments] == [
        (s.option, s.start_hours, s.ended_by) for s in whole.segments
    ]


def test_a_rollout_bills_only_the_rest_of_a_job_under_way():
    grid = make_grid(np.ones((140, 2), bool), [1.0, 2.0], 6.0)
    job = JobSpec(work_hours=12.0, deadline_hours=16.0, cold_start_hours=0.2)
    on_demand = Option("us-central1-a", Mode.ON_DEMAND)
    state = JobState(elapsed_hours=5.0, progress_hours=4.0, running=on_demand, checkpoint_market="us-central1-a")
    result = rollout(get_policy("on-demand"), job, grid, 30, state, np.ones(grid.available.shape, bool), flat_egress(2))
    assert result.met_deadline
    assert result.on_demand_hours == pytest.approx(8.0)  # the 8 h left, no new cold start
    assert result.cost_usd == pytest.approx(8.0 * 6.0)
    assert result.finish_hours == pytest.approx(13.0)


def test_a_rollout_refuses_a_job_older_than_the_history():
    grid = make_grid(np.ones((40, 1), bool), 1.0, 6.0)
    job = JobSpec(work_hours=2.0, deadline_hours=4.0)
    with pytest.raises(ValueError, match="cannot be at tick"):
        old = JobState(elapsed_hours=2.0)
        rollout(get_policy("on-demand"), job, grid, 3, old, np.ones((40, 1), bool), flat_egress(1))


def test_a_view_extended_by_a_future_keeps_its_history_and_holds_todays_prices():
    ticks = 60
    up = np.ones((ticks, 2), bool)
    up[:, 1] = np.arange(ticks) % 7 != 0
    spot = np.tile(np.linspace(1.0, 2.0, ticks)[:, None], (1, 2))
    grid = make_grid(up, spot, 6.0)
    seen = np.zeros(up.shape, bool)
    seen[:30, 0] = True
    view = MarketView(grid, 40, 1, seen, flat_egress(2))
    future = np.array([[True, False], [False, True], [True, True]])
    extended, seen_then, now = view.extended(future, keep_ticks=10)
    assert now == 10 and extended.ticks == 13
    assert np.array_equal(extended.available[:10], grid.available[30:40])
    assert np.array_equal(extended.available[10:], future.astype(int))
    assert np.allclose(extended.spot_usd_per_hour[10:], view.spot_usd_per_hour)  # the future holds today's prices
    assert extended.start == grid.time_at(30)
    assert np.array_equal(seen_then[:10], seen[30:40]) and not seen_then[10:].any()


def test_a_coarser_extended_grid_keeps_every_nth_tick_ending_at_now():
    grid = make_grid(np.ones((60, 2), bool), np.arange(60.0)[:, None] * np.ones(2), 6.0)
    view = MarketView(grid, 40, 1, None, flat_egress(2))
    future = np.ones((7, 2), bool)
    coarse, seen, now = view.extended(future, keep_ticks=9, every=3)
    assert coarse.step_hours == pytest.approx(3 * grid.step_hours)
    assert now == 3 and coarse.ticks == 3 + 3  # history ticks 31, 34, 37; the future's steps 0, 3, 6
    assert coarse.spot_usd_per_hour[:3, 0].tolist() == [31.0, 34.0, 37.0]
    assert coarse.time_at(now) == grid.time_at(40)
    assert seen[:3].all() and not seen[3:].any()


def test_a_coarser_extended_grid_covers_a_job_that_started_with_the_trace():
    grid = make_grid(np.ones((60, 1), bool), 1.0, 6.0)
    view = MarketView(grid, 2, 1, None, flat_egress(1))  # two steps into the trace and the job
    coarse, seen, now = view.extended(np.ones((40, 1), bool), keep_ticks=2, every=3)
    job = JobSpec(work_hours=2.0, deadline_hours=4.0)
    state = JobState(elapsed_hours=2 * grid.step_hours)
    assert now == 1
    assert rollout(get_policy("on-demand"), job, coarse, now, state, seen, flat_egress(1)).met_deadline

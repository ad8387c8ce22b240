"""The fleet's LP lower bounds (simulation/bound.py), the issue's and the restart bound: below the exact optimum alone,
below real fleet runs; the restart bound above the issue's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skynomad_synth import flat_egress, grids, jobs, make_grid

from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.bound import fleet_lower_bound
from airflow_provider_skynomad.simulation.fleet import FleetJob, simulate_fleet
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import window_ticks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(feasible=True), st.data())
def test_both_bounds_of_one_job_alone_are_at_most_its_exact_optimum(job, data):
    """The issue's bound ≤ the restart bound ≤ the exact optimum (simulation.optimal) of one job alone."""
    ticks = window_ticks(job, 1 / 6)
    grid = data.draw(grids(ticks=ticks + 6))
    start = data.draw(st.integers(0, 6))
    optimum = optimal_cost(job, grid, start, flat_egress(len(grid.keys)))
    assert optimum.exact and optimum.feasible
    issue = fleet_lower_bound([(job, start)], grid)
    bound = fleet_lower_bound([(job, start)], grid, restarts=True)
    assert bound.feasible
    assert issue.cost_usd <= bound.cost_usd + 1e-6 * max(1.0, bound.cost_usd)
    assert bound.cost_usd <= optimum.cost_usd + 1e-6 * max(1.0, optimum.cost_usd)


def test_a_capacity_dip_costs_the_restart_bound_a_cold_start_the_issues_bound_leaves_out():
    """One spot market, gone for tick 10 only; the job's work and two cold starts need every other tick of its
    window, and on-demand costs ten times spot. Any run pays a second cold start after the dip, which the issue's
    bound leaves out. The restart bound charges most of it: the LP may run 8/9 of a gang before the dip, so that
    its first rise costs 8/9 of a cold start and the ninth goes to the job's tick outside capacity."""
    step = 1 / 6
    available = np.ones((40, 1), dtype=int)
    available[10] = 0
    grid = make_grid(available, spot=1.0, on_demand=10.0)
    job = JobSpec(work_hours=28 * step, deadline_hours=31 * step, cold_start_hours=step, checkpoint_gb=0.0)
    optimum = optimal_cost(job, grid, 0, flat_egress(1))
    assert optimum.exact and optimum.cost_usd == pytest.approx(30 * step)
    assert fleet_lower_bound([(job, 0)], grid).cost_usd == pytest.approx(29 * step)
    bound = fleet_lower_bound([(job, 0)], grid, restarts=True)
    assert bound.cost_usd == pytest.approx((29 + 8 / 9) * step)
    assert bound.launches == pytest.approx(1 + 8 / 9)


def test_a_newcomer_taking_a_finishers_capacity_pays_no_launch_the_net_rise_misses():
    """The newcomer's launch into the capacity a finisher left is counted by neither p nor q (the net rise is 0):
    the restart bound charges only its first cold start, as the issue's does."""
    grid = make_grid(np.array([[1]] * 40), spot=1.0, on_demand=10.0)
    step = grid.step_hours
    first = JobSpec(work_hours=3 * step, deadline_hours=4 * step, cold_start_hours=step, checkpoint_gb=0.0)
    second = JobSpec(work_hours=3 * step, deadline_hours=4 * step, cold_start_hours=step, checkpoint_gb=0.0)
    fleet = [(first, 0), (second, 4)]
    assert fleet_lower_bound(fleet, grid, restarts=True).cost_usd == pytest.approx(
        fleet_lower_bound(fleet, grid).cost_usd
    )


def test_one_job_on_always_free_spot_pays_work_and_one_cold_start_at_the_spot_price():
    grid = make_grid(np.ones((30, 2), dtype=int), spot=[1.0, 2.0], on_demand=5.0)
    job = JobSpec(work_hours=2.0, deadline_hours=4.0, cold_start_hours=0.2, checkpoint_gb=0.0)
    assert fleet_lower_bound([(job, 0)], grid).cost_usd == pytest.approx(1.0 * 2.2)
    assert optimal_cost(job, grid, 0, flat_egress(2)).cost_usd == pytest.approx(1.0 * 2.2)


def test_capacity_binds_across_jobs_and_the_rest_is_on_demand():
    """One gang fits the only spot market and two jobs must run every tick: beyond the market's gang and
    each job's tick outside capacity, the bound pays on-demand."""
    grid = make_grid(np.array([[1, 0]] * 30), spot=[1.0, 2.0], on_demand=5.0)
    job = JobSpec(work_hours=2.0, deadline_hours=2.0, cold_start_hours=0.0, checkpoint_gb=0.0)
    alone = fleet_lower_bound([(job, 0)], grid).cost_usd
    two = fleet_lower_bound([(job, 0), (job, 0)], grid)
    free = 2 * grid.step_hours  # the two jobs' ticks outside capacity, at the cheapest spot price
    assert alone == pytest.approx(2.0 * 1.0)
    assert two.on_demand_usd == pytest.approx((2.0 - free) * 5.0)
    assert two.cost_usd == pytest.approx((2.0 + free) * 1.0 + (2.0 - free) * 5.0)


class Scripted:
    name = "scripted"

    def __init__(self, *options):
        self.options = options

    def decide(self, job, state, view, now):
        return Decision(tuple(self.options))


def test_a_job_launching_into_the_capacity_a_finisher_released_in_the_same_tick_stays_above_the_bound():
    """A one-gang market; job A must run ticks 0–2 (its last a third), job B ticks 2–4 in full. B, acting
    after A in tick 2, launches into the capacity A released: both run on spot in tick 2. Without each
    job's tick outside capacity the LP would put a third of a tick on on-demand and exceed the run."""
    grid = make_grid(np.array([[1]] * 40), spot=1.0, on_demand=10.0)
    step = grid.step_hours
    first = JobSpec(work_hours=2 * step + step / 3, deadline_hours=3 * step, cold_start_hours=0.0, checkpoint_gb=0.0)
    second = JobSpec(work_hours=3 * step, deadline_hours=3 * step, cold_start_hours=0.0, checkpoint_gb=0.0)
    market = grid.keys[0]
    policy = Scripted(Option(market, Mode.SPOT), Option(market, Mode.ON_DEMAND))
    fleet = [FleetJob(first, 0, policy), FleetJob(second, 2, policy)]
    runs = {}
    for seed in range(8):
        result = simulate_fleet(fleet, grid, flat_egress(1), seed=seed)
        runs[result.runs[1].segments[0].option.startswith("spot")] = result
    assert set(runs) == {True, False}  # acting after A, B got spot; acting before, on-demand
    shared = runs[True]
    assert shared.misses == 0 and shared.runs[1].on_demand_hours == 0
    bound = fleet_lower_bound([(first, 0), (second, 2)], grid)
    assert bound.cost_usd <= shared.cost_usd + 1e-9
    assert bound.cost_usd > shared.cost_usd - step / 3 * 10.0 + 1e-9  # the free tick is priced, not dropped
    assert fleet_lower_bound([(first, 0), (second, 2)], grid, restarts=True).cost_usd <= shared.cost_usd + 1e-9


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_bound_is_below_every_on_time_fleet_run(data):
    job = data.draw(jobs(feasible=True, instances=1))
    count = data.draw(st.integers(2, 4))
    ticks = window_ticks(job, 1 / 6)
    grid = data.draw(grids(ticks=ticks + 8))
    starts = [data.draw(st.integers(0, 8)) for _ in range(count)]
    aware = data.draw(st.booleans())
    fleet = [FleetJob(job, s, get_policy("skynomad"), sees_fleet=aware) for s in starts]
    result = simulate_fleet(fleet, grid, flat_egress(len(grid.keys)))
    bound = fleet_lower_bound([(job, s) for s in starts], grid)
    assert math.isfinite(bound.cost_usd)
    if result.misses == 0:
        assert bound.cost_usd <= result.cost_usd + 1e-6 * max(1.0, result.cost_usd)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_restart_bound_is_above_the_issues_and_below_every_on_time_fleet_run(data):
    """Fleets of gangs on churning capacity, planned alone (many restarts, groups lost in their cold start) or
    fleet-aware, or failing over eagerly, with cold starts under and over a step: the restart bound stays below
    every run without misses."""
    gang = data.draw(st.sampled_from([1, 2]))
    job = data.draw(jobs(feasible=True, instances=gang))
    count = data.draw(st.integers(2, 6))
    ticks = window_ticks(job, 1 / 6)
    grid = data.draw(grids(ticks=ticks + 8, max_gang=gang))
    starts = [data.draw(st.integers(0, 8)) for _ in range(count)]
    aware = data.draw(st.booleans())
    policy = data.draw(st.sampled_from(["skynomad", "eager-failover"]))
    fleet = [FleetJob(job, s, get_policy(policy), sees_fleet=aware) for s in starts]
    result = simulate_fleet(fleet, grid, flat_egress(len(grid.keys)), seed=data.draw(st.integers(0, 3)))
    specs = [(job, s) for s in starts]
    issue = fleet_lower_bound(specs, grid)
    bound = fleet_lower_bound(specs, grid, restarts=True)
    assert math.isfinite(bound.cost_usd)
    assert issue.cost_usd <= bound.cost_usd + 1e-6 * max(1.0, bound.cost_usd)
    if result.misses == 0:
        assert bound.cost_usd <= result.cost_usd + 1e-6 * max(1.0, result.cost_usd)


def test_one_gang_size_per_fleet():
    grid = make_grid(np.ones((30, 2), dtype=int), spot=[1.0, 2.0], on_demand=5.0)
    small = JobSpec(work_hours=1.0, deadline_hours=2.0)
    with pytest.raises(ValueError, match="one gang size"):
        fleet_lower_bound([(small, 0), (JobSpec(work_hours=1.0, deadline_hours=2.0, instances=2), 0)], grid)

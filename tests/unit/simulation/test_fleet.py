"""The fleet simulator: market.capacity's rule in the loop, one accounting with `simulate`, fleet-aware yielding."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.fleet import FleetJob, simulate_fleet
from airflow_provider_skynomad.simulation.simulator import simulate


class Scripted:
    """Tries the same list every step."""

    name = "scripted"

    def __init__(self, *options):
        self.options = options

    def decide(self, job, state, view, now):
        return Decision(tuple(self.options))


def spot(market):
    return Option(market, Mode.SPOT)


def on_demand(market):
    return Option(market, Mode.ON_DEMAND)


def markets_run(result):
    return [segment.option for segment in result.segments]


JOB = JobSpec(work_hours=1.0, deadline_hours=2.0, cold_start_hours=0.0, checkpoint_gb=0.0)


def test_two_jobs_in_a_one_instance_market_the_second_is_refused_and_takes_its_next_option():
    grid = make_grid(np.ones((20, 2), dtype=int), spot=[1.0, 2.0], on_demand=5.0)
    z_a, z_b = grid.keys
    policy = Scripted(spot(z_a), spot(z_b), on_demand(z_a))
    jobs = [FleetJob(JOB, 2, policy), FleetJob(JOB, 2, policy)]
    runs = simulate_fleet(jobs, grid, flat_egress(2)).runs
    firsts = sorted(markets_run(r)[0] for r in runs)
    assert firsts == [f"spot({z_a})", f"spot({z_b})"]  # one got a; the other was refused and fell through to b

    only_a = make_grid(np.array([[1, 0]] * 20), spot=[1.0, 2.0], on_demand=5.0)
    runs = simulate_fleet(jobs, only_a, flat_egress(2)).runs
    assert sorted(markets_run(r)[0] for r in runs) == [f"on-demand({z_a})", f"spot({z_a})"]
    assert all(r.met_deadline for r in runs)


def test_a_capacity_drop_takes_back_the_youngest_group_first():
    available = np.full((30, 1), 2)
    available[8:] = 1  # room for one group from tick 8
    grid = make_grid(available, spot=1.0, on_demand=5.0)
    key = grid.keys[0]
    policy = Scripted(spot(key), on_demand(key))
    long_job = JobSpec(work_hours=2.0, deadline_hours=4.0, cold_start_hours=0.0, checkpoint_gb=0.0)
    older, younger = simulate_fleet([FleetJob(long_job, 0, policy), FleetJob(long_job, 2, policy)], grid).runs
    assert older.preemptions == 0 and markets_run(older) == [f"spot({key})"]
    assert younger.preemptions == 1
    assert [s.ended_by for s in younger.segments][0] == "preempted"
    assert markets_run(younger)[1] == f"on-demand({key})"  # refused again: the older group holds what is left
    assert younger.segments[0].end_hours == pytest.approx((8 - 2) * grid.step_hours)


def test_a_fleet_of_one_is_simulate():
    rng = np.random.default_rng(3)
    available = rng.integers(0, 3, size=(80, 3)) * (rng.random((80, 3)) < 0.8)
    grid = make_grid(available, spot=rng.uniform(0.5, 2.0, (80, 3)), on_demand=[4.0, 4.5, 5.0])
    job = JobSpec(work_hours=3.0, deadline_hours=4.5, cold_start_hours=0.2, checkpoint_gb=10.0, instances=2)
    for start in (0, 10, 40):
        for name in ("skynomad", "eager-failover", "on-demand"):
            alone = simulate(get_policy(name), job, grid, start, flat_egress(3))
            (fleet,) = simulate_fleet([FleetJob(job, start, get_policy(name))], grid, flat_egress(3)).runs
            assert fleet.to_dict(timeline=True) == alone.to_dict(timeline=True)
            assert fleet.cost_usd == alone.cost_usd


def scarce_market():
    """a: cheap, room for one gang; b: dearer, plenty; long history of both up."""
    available = np.tile(np.array([[1, 5]]), (300, 1))
    return make_grid(available, spot=[1.0, 1.6], on_demand=6.0)


def waiting_for_a(slack_hours: float, grid) -> Fleet:
    rows = [{"job_id": "other", "market": grid.keys[0], "mode": "waiting", "count": 1, "since": 0.0,
             "slack_hours": slack_hours}]  # fmt: skip
    return Fleet.from_rows(rows, grid.markets, me="me")


def test_fleet_aware_skynomad_yields_the_scarce_market_to_a_job_with_less_slack():
    grid = scarce_market()
    z_a, z_b = grid.keys
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.1, checkpoint_gb=0.0)  # slack 10 h
    state, tick = JobState(), 200

    def decide(fleet):
        view = MarketView(grid, tick, 1, egress_usd_per_gb=flat_egress(2), fleet=fleet)
        return get_policy("skynomad").decide(job, state, view, 0.0)

    alone = decide(None)
    assert alone.first == spot(z_a) and alone.wants is None
    yielding = decide(waiting_for_a(2.0, grid))  # the other job has less slack: a is its
    assert spot(z_a) not in yielding.try_in_order  # with 10 h of slack it waits rather than pay b's price
    assert yielding.wants == z_a  # and says it would rather run in a: its own claim
    keeping = decide(waiting_for_a(15.0, grid))  # more slack than this job: no yielding
    assert keeping.first == spot(z_a)


def test_fleet_aware_skynomad_does_not_plan_on_a_market_its_fleet_fills_and_still_meets_deadlines():
    grid = scarce_market()
    z_a, _ = grid.keys
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.1, checkpoint_gb=0.0)
    rows = [{"job_id": "other", "market": z_a, "mode": "spot", "count": 1, "since": 1.0, "slack_hours": 30.0}]
    view = MarketView(grid, 200, 1, egress_usd_per_gb=flat_egress(2), fleet=Fleet.from_rows(rows, grid.markets))
    decision = get_policy("skynomad").decide(job, JobState(), view, 0.0)
    assert spot(z_a) not in decision.try_in_order  # held by an older group: nothing left to try


def test_fleet_aware_jobs_in_the_loop_meet_every_deadline_and_give_a_to_the_tighter_job():
    grid = scarce_market()
    tight = JobSpec(work_hours=10.0, deadline_hours=11.0, cold_start_hours=0.1, checkpoint_gb=0.0)
    loose = JobSpec(work_hours=5.0, deadline_hours=11.0, cold_start_hours=0.1, checkpoint_gb=0.0)
    jobs = [FleetJob(loose, 200, get_policy("skynomad"), True), FleetJob(tight, 201, get_policy("skynomad"), True)]
    loose_run, tight_run = simulate_fleet(jobs, grid, flat_egress(2)).runs
    assert loose_run.met_deadline and tight_run.met_deadline


def test_a_view_without_a_fleet_decides_as_before():
    grid = scarce_market()
    job = JobSpec(work_hours=10.0, deadline_hours=20.0)
    for tick in (50, 120, 250):
        plain = MarketView(grid, tick, 1, egress_usd_per_gb=flat_egress(2))
        none = MarketView(grid, tick, 1, egress_usd_per_gb=flat_egress(2), fleet=None)
        a = get_policy("skynomad").decide(job, JobState(), plain, 0.0)
        b = get_policy("skynomad").decide(job, JobState(), none, 0.0)
        assert a == b and a.wants is None and "wants" not in a.to_dict()

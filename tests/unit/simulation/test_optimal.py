"""The exact offline optimum: hand-made cases, exact vs brute force, a lower bound on every policy, fast."""

from __future__ import annotations

import math
import time
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skynomad_synth import flat_egress, grids, jobs, make_grid, markets

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.grid import Market
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.simulation.evaluate import Evaluation
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import window_ticks

SPOT, OD = "spot", "on-demand"


def brute_force(job: JobSpec, grid, start: int, egress: np.ndarray) -> float:
    """Minimum cost over every sequence of simulator actions (stay / idle / launch spot or on-demand anywhere).

    Mirrors the simulator step by step in integer seconds: a spot group is lost when its market
    has no capacity at the start of a step; a launch pays S·egress(checkpoint → market) and a cold
    start (plus transfer time when the checkpoint moves), and there is no checkpoint until the job
    has made progress; the step is billed whole unless the job
    finishes inside it, in which case only the time needed is billed; finishing after T is infeasible.
    """
    dt = round(grid.step_hours * 3600)
    cold = round(job.cold_start_hours * 3600)
    transfer = round(job.transfer_hours(True) * 3600)
    work = round(job.work_hours * 3600)
    deadline = job.deadline_hours * 3600 + 1e-6
    ticks = window_ticks(job, grid.step_hours)
    usable = grid.usable(job.instances)
    n = len(grid.markets)
    price = {SPOT: grid.spot_usd_per_hour * job.instances, OD: grid.on_demand_usd_per_hour * job.instances}

    @cache
    def best(k: int, running, warm: int, progress: int, checkpoint) -> float:
        if k == ticks:
            return math.inf
        g = start + k
        if running is not None and running[1] == SPOT and not usable[g, running[0]]:
            running, warm = None, 0  # preempted; the checkpoint stays where it was
        choices = [(None, 0, 0.0)]  # idle
        if running is not None:
            choices.append((running, warm, 0.0))  # keep the group: no new cold start
        for m in range(n):
            for mode in (SPOT, OD):
                if (m, mode) == running or (mode == SPOT and not usable[g, m]):
                    continue
                moved = checkpoint is not None and checkpoint != m
                fee = job.checkpoint_gb * egress[checkpoint, m] if checkpoint is not None else 0.0
                choices.append(((m, mode), cold + (transfer if moved else 0), fee))
        out = math.inf
        for option, w, fee in choices:
            if option is None:
                out = min(out, best(k + 1, None, 0, progress, checkpoint))
                continue
            m, mode = option
            rate = price[mode][g, m] / 3600
            warm_now = min(w, dt)
            remaining = work - progress
            if dt - warm_now >= remaining:  # finishes inside this step
                used = warm_now + remaining
                if k * dt + used <= deadline:
                    out = min(out, fee + rate * used)
                continue
            # A checkpoint moves with each launch; before any progress there is none.
            after = progress + dt - warm_now
            where = m if checkpoint is not None or after > 0 else None
            out = min(out, fee + rate * dt + best(k + 1, option, w - warm_now, after, where))
        return out

    return best(0, None, 0, 0, None)


@st.composite
def tiny(draw):
    """2 markets, about 8 ten-minute steps, durations in whole minutes (so the DP is exact)."""
    work = draw(st.integers(20, 70)) * 60 / 3600  # 20–70 minutes
    cold = draw(st.sampled_from([6, 9, 12, 15])) * 60 / 3600
    slack = draw(st.integers(-10, 40)) * 60 / 3600  # may be infeasible
    deadline = max(work + slack + cold, 0.1)
    deadline = min(deadline, 80 / 60)
    bandwidth = draw(st.sampled_from([None, 500.0, 1000.0]))  # 50 GB → 6 or 3 minutes of transfer
    job = JobSpec(
        work,
        deadline,
        cold,
        checkpoint_gb=draw(st.sampled_from([0.0, 50.0])),
        instances=draw(st.integers(1, 2)),
        bandwidth_gb_per_hour=bandwidth,
    )
    ticks = window_ticks(job, 1 / 6) + 2
    grid = draw(grids(ticks=ticks, n_markets=2, max_gang=job.instances))
    egress = np.array([[0.0, draw(st.sampled_from([0.01, 0.05]))], [draw(st.sampled_from([0.01, 0.08])), 0.0]])
    return job, grid, draw(st.integers(0, 2)), egress


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny())
def test_optimum_equals_brute_force_on_tiny_instances(case):
    job, grid, start, egress = case
    expected = brute_force(job, grid, start, egress)
    got = optimal_cost(job, grid, start, egress)
    assert got.exact
    assert got.feasible == math.isfinite(expected)
    if got.feasible:
        assert got.cost_usd == pytest.approx(expected, abs=1e-9, rel=1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny(), st.integers(3, 12))
def test_coarsened_optimum_is_still_a_lower_bound(case, max_levels):
    job, grid, start, egress = case
    expected = brute_force(job, grid, start, egress)
    got = optimal_cost(job, grid, start, egress, max_levels=max_levels)
    if math.isfinite(expected):
        assert got.feasible and got.cost_usd <= expected + 1e-9
    if not got.exact:
        assert got.quantum_seconds * max_levels >= job.work_hours * 3600 - 1e-6


@st.composite
def odd(draw):
    """2 markets, 6–10 steps of an odd size (195 s, 7 or 13 minutes), cold starts and work in odd seconds."""
    step_s = draw(st.sampled_from([195, 420, 780, 333]))
    work_s = draw(st.integers(2 * step_s, 6 * step_s))
    cold_s = draw(st.sampled_from([0, 100, 555, 720, 301]))
    slack_s = draw(st.integers(-step_s, 3 * step_s))
    deadline_s = max(work_s + cold_s + slack_s, step_s)
    job = JobSpec(
        work_s / 3600,
        deadline_s / 3600,
        cold_s / 3600,
        checkpoint_gb=draw(st.sampled_from([0.0, 50.0])),
        bandwidth_gb_per_hour=draw(st.sampled_from([None, 1000.0, 700.0])),  # 50 GB: 180 s or 257.14… s
    )
    ticks = window_ticks(job, step_s / 3600) + 2
    base = draw(grids(ticks=ticks, n_markets=2))
    grid = make_grid(base.available, base.spot_usd_per_hour, base.on_demand_usd_per_hour, step_hours=step_s / 3600)
    egress = np.array([[0.0, draw(st.sampled_from([0.01, 0.05]))], [draw(st.sampled_from([0.01, 0.08])), 0.0]])
    return job, grid, draw(st.integers(0, 2)), egress


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd())
def test_optimum_is_exact_or_a_bracket_at_odd_step_sizes(case):
    """Odd steps and warm-ups: exact when the lattice is whole milliseconds, else a bracket around the truth."""
    job, grid, start, egress = case
    expected = brute_force(job, grid, start, egress)
    got = optimal_cost(job, grid, start, egress)
    assert got.feasible == math.isfinite(expected) or not got.exact
    if got.exact:
        assert got.gap == 0.0
        if got.feasible:
            assert got.cost_usd == pytest.approx(expected, abs=1e-9, rel=1e-9)
    elif math.isfinite(expected):
        assert got.cost_usd <= expected + 1e-9 <= got.upper_usd + 2e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd(), st.integers(2, 40))
def test_a_forced_bracket_holds_the_optimum_and_its_upper_end_is_a_real_schedule(case, band):
    """With a tiny level budget the result is a certified bracket: lower ≤ brute force ≤ upper."""
    job, grid, start, egress = case
    expected = brute_force(job, grid, start, egress)
    got = optimal_cost(job, grid, start, egress, max_band_levels=band)
    if got.exact:
        return  # the lattice already fits the budget
    if math.isfinite(expected):
        assert got.feasible and got.cost_usd <= expected + 1e-9
        assert expected <= got.upper_usd + 1e-9
        assert got.gap >= 0.0
    if math.isfinite(got.upper_usd):
        assert math.isfinite(expected)  # the upper end is the cost of a schedule that meets the deadline


def test_195_second_steps_against_a_720_second_cold_start_stay_exact():
    """The AWS trace's step with the default cold start: quantum 15 s, exact, no coarsening."""
    rng = np.random.default_rng(3)
    step = 195 / 3600
    job = JobSpec(work_hours=10.0, deadline_hours=11.0, cold_start_hours=0.2, checkpoint_gb=50)
    ticks = window_ticks(job, step)
    avail = np.repeat(rng.random((ticks // 10 + 1, 3)) < 0.7, 10, axis=0)[:ticks]
    grid = make_grid(avail, [0.9, 1.1, 1.0], [3.06, 3.06, 3.06], step_hours=step)
    best = optimal_cost(job, grid, 0, flat_egress(3))
    assert best.exact and best.quantum_seconds == 15 and best.gap == 0.0
    coarse = optimal_cost(job, grid, 0, flat_egress(3), max_band_levels=40)
    assert not coarse.exact
    assert coarse.cost_usd <= best.cost_usd + 1e-9 <= coarse.upper_usd + 2e-9


def test_one_always_available_cheap_spot_market_costs_price_times_work_plus_cold_start():
    available = np.zeros((60, 3), bool)
    available[:, 1] = True
    grid = make_grid(available, [0.5, 1.25, 0.3], [10.0, 8.0, 9.0])  # the cheaper spot markets never have capacity
    job = JobSpec(work_hours=3.0, deadline_hours=5.0, cold_start_hours=0.2, checkpoint_gb=50)
    best = optimal_cost(job, grid, 6, flat_egress(3))
    assert best.exact and best.feasible
    assert best.cost_usd == pytest.approx(1.25 * 3.2)


def test_spot_lost_for_good_then_on_demand():
    available = np.zeros((60, 1), bool)
    available[:6] = True  # one hour of spot, then none
    grid = make_grid(available, 1.0, 10.0, market_list=markets(1))
    job = JobSpec(work_hours=2.0, deadline_hours=3.0, cold_start_hours=0.2, checkpoint_gb=50)
    # 1 h spot (0.8 h of work), then on-demand for 1.2 h of work + a second cold start: 1 + 10·1.4 = 15,
    # cheaper than on-demand throughout (10·2.2 = 22).
    assert optimal_cost(job, grid, 0, flat_egress(1)).cost_usd == pytest.approx(15.0)
    # With P + 2d > T there is no time for the second cold start: on-demand from the start.
    tight = JobSpec(work_hours=2.0, deadline_hours=2.3, cold_start_hours=0.2)
    assert optimal_cost(tight, grid, 0, flat_egress(1)).cost_usd == pytest.approx(22.0)


def test_no_spot_at_all_costs_the_cheapest_on_demand():
    grid = make_grid(np.zeros((40, 3), bool), [0.5, 0.6, 0.7], [10.0, 8.0, 9.0])
    job = JobSpec(work_hours=2.5, deadline_hours=4.0, cold_start_hours=0.15, instances=4)
    assert optimal_cost(job, grid, 0, flat_egress(3)).cost_usd == pytest.approx(8.0 * 4 * 2.65)


def test_an_infeasible_deadline_has_no_optimum():
    grid = make_grid(np.ones((40, 2), bool), [0.5, 0.6], [10.0, 8.0])
    best = optimal_cost(JobSpec(work_hours=2.0, deadline_hours=2.1, cold_start_hours=0.2), grid, 0, flat_egress(2))
    assert not best.feasible and best.cost_usd == math.inf


def test_window_must_fit():
    grid = make_grid(np.ones((10, 2), bool), [0.5, 0.6], [10.0, 8.0])
    with pytest.raises(ValueError, match="does not fit"):
        optimal_cost(JobSpec(work_hours=1.0, deadline_hours=1.5), grid, 2, flat_egress(2))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(feasible=True), st.data())
def test_optimum_is_a_lower_bound_on_every_policy_in_every_window(job, data):
    """Through Evaluation (what `skynomad evaluate` runs): several windows, every policy incl. each zone's
    uniform progress."""
    ticks = window_ticks(job, 1 / 6)
    grid = data.draw(grids(ticks=ticks + 12))
    egress = EgressModel().matrix(grid.markets)
    report = Evaluation(job, grid, egress, window_step_hours=1.0, max_windows=3).run()
    assert 1 <= len(report["windows"]) <= 3
    for window in report["windows"]:
        results = window["results"]
        optimum = results["optimal"]
        assert optimum["met_deadline"] and optimum["exact"]
        assert set(results) == {
            "optimal",
            "skynomad",
            "on-demand",
            "eager-failover",
            *(f"uniform-progress[{k}]" for k in grid.keys),
        }
        for name, result in results.items():
            if name == "optimal" or not result["met_deadline"]:
                continue  # (feasible-deadline misses are test_simulator's business)
            assert optimum["cost_usd"] <= result["cost_usd"] + 1e-6, (window["start"], name, optimum, result)


def test_a_52_hour_window_on_13_zones_solves_in_well_under_10_seconds():
    rng = np.random.default_rng(7)
    n, ticks = 13, 320
    ms = tuple(Market(f"z{j}", "gcp", f"region{j % 7}", f"z{j}", "t") for j in range(n))
    avail = np.repeat(rng.random((ticks // 8, n)) < 0.6, 8, axis=0)
    grid = make_grid(avail, rng.uniform(1, 3, n), rng.uniform(8, 12, n), market_list=ms)
    job = JobSpec(work_hours=43.19, deadline_hours=51.83, cold_start_hours=0.2, checkpoint_gb=50)
    started = time.perf_counter()
    best = optimal_cost(job, grid, 0, flat_egress(n))
    elapsed = time.perf_counter() - started
    assert best.feasible and best.exact
    assert elapsed < 10.0
    # A sanity bound: never more than on-demand in the cheapest on-demand zone.
    assert best.cost_usd <= grid.on_demand_usd_per_hour[0].min() * (43.19 + 0.2) + 1e-6

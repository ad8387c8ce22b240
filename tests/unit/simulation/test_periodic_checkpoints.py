"""Periodic checkpoints: a preemption without a final checkpoint loses the work since the last one.

The simulator takes it back, the safety net plans the rescue with it (no feasible deadline
missed), the optimum stays a lower bound and `evaluate` brackets it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skynomad_synth import flat_egress, grids, jobs, make_grid, markets

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobSpecError, JobState
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.planner.safety import is_safe
from airflow_provider_skynomad.simulation.evaluate import Evaluation, OptimumGapWarning
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import simulate, window_ticks

HALF_HOUR = {"checkpoint_interval_hours": 0.5}


class Always:
    """Spot in the first market whenever it has capacity, else on-demand in the second."""

    name = "always"

    def decide(self, job, state, view, now):
        return Decision((Option(view.keys[0], Mode.SPOT), Option(view.keys[1], Mode.ON_DEMAND)))


def one_preemption_grid():
    available = np.ones((60, 2), bool)
    available[8:10, 0] = False  # spot is lost at 1h20 (tick 8): 1h20 − 0.2 h cold start = 1.133 h made
    return make_grid(available, [1.0, 3.0], [6.0, 6.0])


def run(**job_fields):
    job = JobSpec(work_hours=3.0, deadline_hours=6.0, cold_start_hours=0.2, checkpoint_gb=0, **job_fields)
    return simulate(Always(), job, one_preemption_grid(), 0, flat_egress(2))


def test_a_preemption_loses_the_work_since_the_last_periodic_checkpoint():
    saved = run()
    lossy = run(**HALF_HOUR)
    # 1.133 h made by the preemption, checkpoints at 0.5 and 1.0: 0.133 h taken back and redone.
    assert lossy.lost_work_hours == pytest.approx(1.1333333 - 1.0, abs=1e-6)
    assert saved.lost_work_hours == 0.0
    assert lossy.met_deadline and saved.met_deadline
    assert lossy.finish_hours == pytest.approx(saved.finish_hours + lossy.lost_work_hours)
    assert lossy.cost_usd > saved.cost_usd
    assert lossy.to_dict()["lost_work_hours"] == pytest.approx(lossy.lost_work_hours, abs=1e-6)
    assert "lost_work_hours" not in saved.to_dict()


def test_a_notice_long_enough_for_a_final_checkpoint_loses_nothing():
    assert run(**HALF_HOUR, final_checkpoint_on_notice=True).to_dict() == run().to_dict()


def test_a_stop_the_job_chooses_saves_first():
    """Idling on purpose writes a checkpoint: a preemption after the next launch loses only that group's work."""

    class StopAndGo:
        name = "stop-and-go"

        def decide(self, job, state, view, now):
            if 0.95 < now < 1.2:
                return Decision((None,))  # idle for two steps at 1.0 h (0.8 h made, 0.3 h unsaved)
            return Decision((Option(view.keys[0], Mode.SPOT), Option(view.keys[1], Mode.ON_DEMAND)))

    available = np.ones((60, 2), bool)
    available[10:12, 0] = False  # preempted at 1h40: relaunched at 1h20, 0.133 h made since
    job = JobSpec(work_hours=3.0, deadline_hours=6.0, cold_start_hours=0.2, checkpoint_gb=0, **HALF_HOUR)
    result = simulate(StopAndGo(), job, make_grid(available, [1.0, 3.0], [6.0, 6.0]), 0, flat_egress(2))
    assert result.lost_work_hours == pytest.approx(0.1333333, abs=1e-6)


def test_a_group_that_loses_all_its_work_leaves_no_checkpoint_to_move():
    state = JobState(progress_hours=0.3, unsaved_hours=0.3, checkpoint_market="a", running=Option("a", Mode.SPOT))
    assert state.lost().progress_hours == 0.0 and state.lost().checkpoint_market is None
    partly = replace(state, progress_hours=1.3)
    assert partly.lost().progress_hours == pytest.approx(1.0) and partly.lost().checkpoint_market == "a"


def test_job_state_without_unsaved_work_still_loads():
    """Task state written before periodic checkpoints existed has no `unsaved_hours`."""
    data = JobState(progress_hours=1.0).to_dict()
    data.pop("unsaved_hours")
    assert JobState.from_dict(data).unsaved_hours == 0.0


def test_a_negative_interval_is_refused():
    with pytest.raises(JobSpecError, match="checkpoint_interval_hours"):
        JobSpec(work_hours=1.0, deadline_hours=2.0, checkpoint_interval_hours=-0.5)


def test_the_safety_net_counts_the_work_a_loss_would_take_back():
    """Keeping a spot group is unsafe once the work a loss takes back could no longer be redone in time."""
    grid = make_grid(np.ones((40, 2), bool), [1.0, 3.0], [6.0, 6.0], market_list=markets(2))
    key = grid.keys[0]
    job = JobSpec(work_hours=3.0, deadline_hours=3.9, cold_start_hours=0.2, checkpoint_gb=0, **HALF_HOUR)
    here = Option(key, Mode.SPOT)
    # t = 2.8, p = 2.3, 0.3 h unsaved. Lost after this step (1/6 h): 0.533 h left + a cold start from
    # t + 1/6 ends at 3.7 ≤ 3.9; with the 0.3 + 1/6 h not yet checkpointed redone too, at 4.17 > 3.9.
    state = JobState(elapsed_hours=2.8, progress_hours=2.3, running=here, checkpoint_market=key, unsaved_hours=0.3)
    view = MarketView(grid, 4, 1, np.ones((40, 2), bool), flat_egress(2))
    assert is_safe(replace(job, checkpoint_interval_hours=0.0), state, view, here)
    assert is_safe(replace(job, final_checkpoint_on_notice=True), state, view, here)
    assert not is_safe(job, state, view, here)
    assert is_safe(job, state, view, Option(key, Mode.ON_DEMAND))  # on-demand is never lost


@st.composite
def lossy_cases(draw):
    job = draw(jobs(feasible=True, instances=draw(st.integers(1, 2))))
    interval = draw(st.sampled_from([0.25, 0.5, 1.0]))
    job = replace(job, checkpoint_interval_hours=interval)
    ticks = window_ticks(job, 1 / 6)
    grid = draw(grids(ticks=ticks + 12, max_gang=2))
    return job, grid, draw(st.integers(0, 12)), EgressModel().matrix(grid.markets)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lossy_cases())
def test_no_policy_misses_a_feasible_deadline_when_preemptions_lose_work(case):
    job, grid, start, egress = case
    names = ["skynomad", "eager-failover", "on-demand"]
    runs = [(n, get_policy(n)) for n in names] + [(k, get_policy("uniform-progress", zone=k)) for k in grid.keys]
    for name, policy in runs:
        result = simulate(policy, job, grid, start, egress)
        assert result.met_deadline, (name, job, result.to_dict())


@pytest.mark.filterwarnings("ignore::airflow_provider_skynomad.simulation.evaluate.OptimumGapWarning")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lossy_cases())
def test_the_optimum_with_lost_work_is_a_lower_bound_on_every_run(case):
    """Exact when the interval fits the lattice; else the lossless bound, bracketed by the cheapest on-time run."""
    job, grid, _, egress = case
    report = Evaluation(job, grid, egress, window_step_hours=1.0, max_windows=2).run()
    for window in report["windows"]:
        results = window["results"]
        optimum = results["optimal"]
        on_time = [r["cost_usd"] for n, r in results.items() if n != "optimal" and r["met_deadline"]]
        assert on_time  # no feasible deadline is missed
        assert optimum["cost_usd"] <= min(on_time) + 1e-6
        if not optimum["exact"]:
            assert optimum["upper_usd"] == pytest.approx(min(on_time), abs=1e-6)


def test_an_interval_too_fine_for_the_lattice_is_bracketed_by_the_cheapest_on_time_run():
    """A 1/7 h interval is no whole number of milliseconds: the DP falls back to the lossless bound."""
    job = JobSpec(work_hours=3.0, deadline_hours=6.0, cold_start_hours=0.2, checkpoint_gb=0)
    job = replace(job, checkpoint_interval_hours=1 / 7)
    grid = one_preemption_grid()
    fallback = optimal_cost(job, grid, 0, flat_egress(2))
    lossless = optimal_cost(replace(job, checkpoint_interval_hours=0.0), grid, 0, flat_egress(2))
    assert not fallback.exact and fallback.upper_usd == np.inf and fallback.cost_usd == lossless.cost_usd
    with pytest.warns(OptimumGapWarning, match="only bracketed"):
        report = Evaluation(job, grid, flat_egress(2), policies=("optimal", "on-demand"), max_windows=1).run()
    results = report["windows"][0]["results"]
    assert results["optimal"]["upper_usd"] == results["on-demand"]["cost_usd"]
    assert results["optimal"]["gap"] > 0.001
    assert report["summary"]["optimal"]["exact"] is False


def test_the_exact_optimum_with_lost_work_pays_for_the_lost_work():
    """Spot lost at 1h20 (0.133 h unsaved), back at 1h40, deadline 3.88 h: too tight to stop early and wait.

    Lossless: 1.333 h of spot, then 2.067 h more = 3.4 $. Stopping at 1h10 to save would finish at
    3.9 h, late; so the optimum rides into the preemption and redoes 0.133 h: 3.533 $.
    """
    job = JobSpec(work_hours=3.0, deadline_hours=3.88, cold_start_hours=0.2, checkpoint_gb=0, **HALF_HOUR)
    grid = one_preemption_grid()
    lossy = optimal_cost(job, grid, 0, flat_egress(2))
    lossless = optimal_cost(replace(job, checkpoint_interval_hours=0), grid, 0, flat_egress(2))
    assert lossy.exact
    assert lossless.cost_usd == pytest.approx(3.4)
    assert lossy.cost_usd == pytest.approx(3.4 + 0.4 / 3)
    # With time to stop early and wait, losing nothing costs nothing extra.
    roomy = replace(job, deadline_hours=6.0)
    assert optimal_cost(roomy, grid, 0, flat_egress(2)).cost_usd == pytest.approx(3.2)


def lossy_brute_force(job: JobSpec, grid, start: int, egress: np.ndarray) -> float:
    """Minimum cost over every sequence of simulator actions, with unsaved progress as part of the state.

    As test_optimal.brute_force, in integer seconds, plus: a spot group preempted loses the progress it
    made since its last periodic checkpoint (back at 0 there is no checkpoint); stopping or replacing a
    group saves first; on-demand is never lost.
    """
    from functools import cache

    dt = round(grid.step_hours * 3600)
    cold = round(job.cold_start_hours * 3600)
    interval = round(job.checkpoint_interval_hours * 3600)
    work = round(job.work_hours * 3600)
    deadline = job.deadline_hours * 3600 + 1e-6
    ticks = window_ticks(job, grid.step_hours)
    usable = grid.usable(job.instances)
    price = {"spot": grid.spot_usd_per_hour * job.instances, "od": grid.on_demand_usd_per_hour * job.instances}

    @cache
    def best(k, running, warm, progress, unsaved, checkpoint) -> float:
        if k == ticks:
            return np.inf
        g = start + k
        if running is not None and running[1] == "spot" and not usable[g, running[0]]:
            progress -= unsaved
            checkpoint = checkpoint if progress > 0 else None
            running, warm, unsaved = None, 0, 0
        choices = [(None, 0, 0.0, 0)]
        if running is not None:
            choices.append((running, warm, 0.0, unsaved))
        for m in range(len(grid.markets)):
            for mode in ("spot", "od"):
                if (m, mode) == running or (mode == "spot" and not usable[g, m]):
                    continue
                fee = job.checkpoint_gb * egress[checkpoint, m] if checkpoint is not None else 0.0
                choices.append(((m, mode), cold, fee, 0))
        out = np.inf
        for option, w, fee, kept in choices:
            if option is None:
                out = min(out, best(k + 1, None, 0, progress, 0, checkpoint))
                continue
            m, mode = option
            rate = price[mode][g, m] / 3600
            warm_now = min(w, dt)
            if dt - warm_now >= work - progress:
                used = warm_now + work - progress
                if k * dt + used <= deadline:
                    out = min(out, fee + rate * used)
                continue
            made = dt - warm_now
            after = progress + made
            where = m if checkpoint is not None or after > 0 else None
            left = (kept + made) % interval if mode == "spot" else 0
            out = min(out, fee + rate * dt + best(k + 1, option, w - warm_now, after, left, where))
        return out

    return best(0, None, 0, 0, 0, None)


@st.composite
def tiny_lossy(draw):
    """2 markets, about 8 ten-minute steps, whole minutes; checkpoints every 10–30 minutes, S = 0."""
    work = draw(st.integers(20, 60)) * 60 / 3600
    cold = draw(st.sampled_from([6, 12])) * 60 / 3600
    slack = draw(st.integers(0, 40)) * 60 / 3600
    interval = draw(st.sampled_from([10, 15, 20, 30])) * 60 / 3600
    deadline = min(work + slack + cold, 80 / 60)
    gb = draw(st.sampled_from([0.0, 50.0]))
    job = JobSpec(work, deadline, cold, checkpoint_gb=gb, checkpoint_interval_hours=interval)
    grid = draw(grids(ticks=window_ticks(job, 1 / 6) + 2, n_markets=2))
    return job, grid, draw(st.integers(0, 2)), np.array([[0.0, 0.02], [0.05, 0.0]])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_lossy())
def test_the_optimum_with_lost_work_equals_brute_force_on_tiny_instances(case):
    job, grid, start, egress = case
    best = optimal_cost(job, grid, start, egress)
    assert best.exact
    assert best.cost_usd == pytest.approx(lossy_brute_force(job, grid, start, egress), rel=1e-9, abs=1e-9)
    lossless = optimal_cost(replace(job, checkpoint_interval_hours=0.0), grid, start, egress)
    assert lossless.cost_usd <= best.cost_usd + 1e-9

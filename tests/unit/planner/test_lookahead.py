"""The scenario lookahead: the shared deadline guarantee, determinism for a seed, and replans on events."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.forecasts.scenarios import ScenarioSampler
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.lookahead import LookaheadPolicy
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.simulator import simulate


def flaky_grid(seed: int, ticks: int = 120, markets: int = 3):
    """Markets that drop out in random spells, one sometimes cheaper than the others."""
    rng = np.random.default_rng(seed)
    up = np.ones((ticks, markets), bool)
    for m in range(markets):
        for start in rng.integers(0, ticks, 6):
            up[start : start + rng.integers(1, 12), m] = False
    return make_grid(up, rng.uniform(1.0, 3.0, markets), 6.0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("slack_hours", [0.4, 1.0, 4.0])
def test_it_never_misses_a_feasible_deadline(seed, slack_hours):
    grid = flaky_grid(seed)
    job = JobSpec(work_hours=10.0, deadline_hours=10.0 + slack_hours, cold_start_hours=0.2, checkpoint_gb=10)
    result = simulate(LookaheadPolicy(futures=4), job, grid, 0, flat_egress(3))
    assert result.met_deadline


def test_it_uses_spot_when_spot_is_cheap_and_up():
    grid = make_grid(np.ones((120, 2), bool), [1.0, 2.0], 6.0)
    job = JobSpec(work_hours=8.0, deadline_hours=12.0, cold_start_hours=0.2)
    result = simulate(LookaheadPolicy(futures=4), job, grid, 0, flat_egress(2))
    assert result.met_deadline and result.on_demand_hours == 0
    assert result.segments[0].option == "spot(us-central1-a)"


def test_decisions_are_deterministic_for_a_fixed_seed():
    grid = flaky_grid(7)
    job = JobSpec(work_hours=10.0, deadline_hours=12.0, cold_start_hours=0.2)
    runs = [simulate(LookaheadPolicy(futures=6, seed=3), job, grid, 20, flat_egress(3)) for _ in range(2)]
    assert [s.option for s in runs[0].segments] == [s.option for s in runs[1].segments]
    assert runs[0].cost_usd == runs[1].cost_usd
    view = MarketView(grid, 40, 1, egress_usd_per_gb=flat_egress(3))
    futures = [ScenarioSampler().sample(view, 8, 12, np.random.default_rng([3, 40])) for _ in range(2)]
    assert np.array_equal(futures[0], futures[1])


def test_a_preemption_triggers_a_replan_and_a_quiet_step_does_not():
    up = np.ones((60, 2), bool)
    up[20:, 0] = False  # the cheap market drops out at tick 20
    grid = make_grid(up, [1.0, 2.0], 6.0)
    job = JobSpec(work_hours=6.0, deadline_hours=9.0, cold_start_hours=0.2)
    policy = LookaheadPolicy(futures=4, replan_steps=100)
    spot = get_policy("lookahead").decide(job, JobState(), MarketView(grid, 0, 1), 0.0).first
    assert spot is not None and spot.mode is Mode.SPOT
    running = JobState(elapsed_hours=1.0, progress_hours=0.8, running=spot, checkpoint_market=spot.market)
    policy.decide(job, running, MarketView(grid, 6, 1), 1.0)
    policy.decide(job, running.advance(progress_hours=0.95), MarketView(grid, 7, 1), 7 / 6)
    assert policy.replans == 1  # nothing changed: the plan is kept
    preempted = running.advance(progress_hours=3.0, running=None, last_preempted_market=spot.market)
    decision = policy.decide(job, preempted, MarketView(grid, 20, 1), 20 / 6)
    assert policy.replans == 2 and decision.reason == "lookahead: replanned"
    after = policy.decide(job, preempted.advance(elapsed_hours=21 / 6), MarketView(grid, 21, 1), 21 / 6)
    assert policy.replans == 2 and after.reason == "lookahead: plan kept"


def test_the_futures_keep_what_is_observed_now_and_what_markets_do_together():
    up = np.ones((200, 2), bool)
    for start in range(0, 200, 20):
        up[start : start + 5] = False  # both markets drop out together
    grid = make_grid(up, 1.0, 6.0)
    view = MarketView(grid, 101, 1)  # tick 101: both down, observed
    futures = ScenarioSampler(mismatch_weight=5.0).sample(view, 32, 10, np.random.default_rng(0))
    assert not futures[:, 0].any()  # now is as observed
    assert np.array_equal(futures[:, :, 0], futures[:, :, 1])  # the markets move together
    assert futures[:, -1].mean() > 0.5  # and come back as they did


def test_unobserved_markets_count_as_up_once_their_observation_is_stale():
    up = np.zeros((60, 2), bool)
    seen = np.zeros((60, 2), bool)
    seen[:10] = True  # both observed down until tick 9, then never again
    grid = make_grid(up, 1.0, 6.0)
    view = MarketView(grid, 50, 1, seen)
    futures = ScenarioSampler(hold_hours=1.0, mismatch_weight=10.0).sample(view, 32, 3, np.random.default_rng(0))
    assert futures.mean() > 0.9  # last observed 41 steps ago: worth a (free) launch attempt
    assert not ScenarioSampler(hold_hours=10.0).sample(view, 4, 3, np.random.default_rng(0)).any()

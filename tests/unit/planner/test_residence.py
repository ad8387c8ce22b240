"""A move's egress is spread over the checkpoint's expected residence in the new market
(SkyNomadPolicy(residence=True)): the remaining work shared among the placements the slack still pays for."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.safety import spare_slack_hours
from tests.support.forecasters import Stays

TICKS = 240


def checkpoint_market_down():
    """Market a (holds the checkpoint) down at the last tick; market b up. Both spot $1/h, on-demand $10/h;
    moving the 500 GB checkpoint costs $25."""
    a = np.resize(np.array([1] * 20 + [0] * 4), TICKS)
    a[-2], a[-1] = 1, 0
    grid = make_grid(np.stack([a, np.ones(TICKS, dtype=int)], axis=1), spot=[1.0, 1.0], on_demand=[10.0, 10.0])
    return grid, MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.05))


def job(deadline_hours: float) -> JobSpec:
    return JobSpec(work_hours=10.0, deadline_hours=deadline_hours, cold_start_hours=0.2, checkpoint_gb=500.0)


STATE = JobState(elapsed_hours=2.0, progress_hours=1.9, checkpoint_market="us-central1-a")


def decide(deadline_hours: float, **params):
    """What the idle job of STATE tries (decide_from)."""
    return decide_from(STATE, deadline_hours, **params)


def test_with_slack_for_few_restarts_the_egress_is_paid_over_several_stays_and_the_job_moves():
    grid, _ = checkpoint_market_down()
    move = Option(grid.keys[1], Mode.SPOT)
    tries = decide(10.6, residence=True)
    assert move in tries and tries.index(move) < tries.index(IDLE)
    assert move not in decide(10.6, residence=False)  # $25 over one 2 h stay is more than the stay gains


def test_with_slack_for_many_restarts_nothing_changes():
    assert decide(20.0, residence=True) == decide(20.0, residence=False)


@pytest.mark.parametrize("deadline_hours", [10.6, 11.5, 14.0, 20.0])
def test_the_residence_is_the_remaining_work_shared_among_the_placements_left(deadline_hours):
    _, view = checkpoint_market_down()
    policy = SkyNomadPolicy(forecaster=Stays(2.0), residence=True)
    restarts = spare_slack_hours(job(deadline_hours), STATE, view) / 0.2
    assert policy._residence(job(deadline_hours), STATE, view) == pytest.approx(8.1 / (1.0 + restarts))


def running_in(market: str, mode: Mode) -> JobState:
    """1.9 h done at 2.0 h, a group of `mode` in `market` (with the checkpoint) since 1.0 h."""
    return JobState(
        elapsed_hours=2.0, progress_hours=1.9, running=Option(market, mode), running_since_hours=1.0,
        checkpoint_market=market,
    )  # fmt: skip


def decide_from(state: JobState, deadline_hours: float, **params):
    _, view = checkpoint_market_down()
    policy = SkyNomadPolicy(forecaster=Stays(2.0), **params)
    return policy.decide(job(deadline_hours), state, view, state.elapsed_hours).try_in_order


def test_a_job_on_on_demand_leaves_it_for_spot_elsewhere_when_the_egress_pays_over_the_residence():
    grid, _ = checkpoint_market_down()
    on_demand = running_in(grid.keys[0], Mode.ON_DEMAND)
    move = Option(grid.keys[1], Mode.SPOT)
    tries = decide_from(on_demand, 10.6, residence=True)
    assert move in tries and tries[-1] == on_demand.running  # tried before staying on on-demand
    assert move not in decide_from(on_demand, 10.6, residence=False)


def test_a_job_on_spot_weighs_a_move_over_one_stay_as_before():
    """Spot → spot moves keep the per-stay horizon: spread over the residence they chase every cheaper market."""
    grid, _ = checkpoint_market_down()
    b_cheaper = running_in(grid.keys[0], Mode.SPOT)
    policy = SkyNomadPolicy(forecaster=Stays(2.0), residence=True)
    _, view = checkpoint_market_down()
    assert not policy._resides(job(10.6), b_cheaper, view)
    assert policy._resides(job(10.6), STATE, view)
    assert not policy._resides(job(11.5), STATE, view)  # slack for more than 3 cold starts: not thin


def test_options_admitted_before_keep_their_order_and_a_move_admitted_by_the_residence_comes_after():
    """Market b is up at $1/h with the $25 move; the checkpoint's market a is up too now, at $3/h."""
    a = np.ones(TICKS, dtype=int)
    grid = make_grid(np.stack([a, a], axis=1), spot=[3.0, 1.0], on_demand=[10.0, 10.0])
    view = MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.05))
    state = JobState(elapsed_hours=2.0, progress_hours=1.9, checkpoint_market=grid.keys[0])
    tries = SkyNomadPolicy(forecaster=Stays(2.0), residence=True).decide(job(10.6), state, view, 2.0).try_in_order
    plain = SkyNomadPolicy(forecaster=Stays(2.0), residence=False).decide(job(10.6), state, view, 2.0).try_in_order
    here, move = Option(grid.keys[0], Mode.SPOT), Option(grid.keys[1], Mode.SPOT)
    assert plain[0] == here and move not in plain
    assert tries[:2] == (here, move)


def test_in_a_fleet_the_residence_admits_nothing():
    """Alone only: in a fleet the capacity a move lands in is shared (bench_fleet's GCP N = 50 went up with it)."""
    grid, _ = checkpoint_market_down()
    nobody = np.zeros(0)
    view = MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.05), fleet=Fleet(grid.keys, *[nobody] * 5))
    policy = SkyNomadPolicy(forecaster=Stays(2.0))
    assert policy.residence  # the default
    assert not policy._resides(job(10.6), STATE, view)
    assert Option(grid.keys[1], Mode.SPOT) not in policy.decide(job(10.6), STATE, view, 2.0).try_in_order

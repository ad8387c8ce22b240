"""A launch pays for itself (planner/payback.py): the restart after a short stay is charged; declines are logged."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.payback import (
    keeps_on_demand,
    next_price_usd_per_hour,
    next_start_usd,
    stop_pays,
    weigh,
)
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.utility import Scored
from tests.support.forecasters import Stays

JOB = JobSpec(work_hours=10.0, deadline_hours=12.5, cold_start_hours=0.2, checkpoint_gb=0.0)


def flaky_view(up: int, down: int, ticks: int = 240, fleet: bool = True):
    """Market a: no spot offer, on-demand $10/h. Market b: spot $1/h, up `up` ticks then down `down`, over and over;
    up at the last tick. `fleet`: the view shows a fleet (with no other job in it), else the job is alone."""
    pattern = np.array([1] * up + [0] * down)
    b = np.resize(pattern, ticks)[::-1]  # ends at the start of an up run
    available = np.stack([np.zeros(ticks, dtype=int), b], axis=1)
    grid = make_grid(available, spot=[np.inf, 1.0], on_demand=[10.0, 12.0])
    nobody = np.zeros(0)
    others = Fleet(grid.keys, nobody, nobody, nobody, nobody, nobody) if fleet else None
    return grid, MarketView(grid, ticks - 1, 1, None, flat_egress(2), fleet=others)


def on_demand_state(grid, progress: float = 1.0) -> JobState:
    a = Option(grid.keys[0], Mode.ON_DEMAND)
    return JobState(
        elapsed_hours=2.0, progress_hours=progress, running=a, running_since_hours=1.0, checkpoint_market=grid.keys[0]
    )


def test_leaving_on_demand_for_spot_that_stays_half_an_hour_is_declined_and_taken_without_the_rule():
    grid, view = flaky_view(up=3, down=3)
    state = on_demand_state(grid)
    spot_b = Option(grid.keys[1], Mode.SPOT)
    without = SkyNomadPolicy(forecaster=Stays(0.5), payback=False).decide(JOB, state, view, state.elapsed_hours)
    assert without.first == spot_b  # its utility alone says move
    kept = SkyNomadPolicy(forecaster=Stays(0.5)).decide(JOB, state, view, state.elapsed_hours)
    assert kept.first == state.running  # the round trip back to on-demand does not pay


def test_spot_that_stays_for_hours_is_taken():
    grid, view = flaky_view(up=3, down=3)
    state = on_demand_state(grid)
    decision = SkyNomadPolicy(forecaster=Stays(3.0)).decide(JOB, state, view, state.elapsed_hours)
    assert decision.first == Option(grid.keys[1], Mode.SPOT)


def test_a_stay_expected_to_finish_the_job_pays_no_restart():
    grid, view = flaky_view(up=2, down=2)
    state = on_demand_state(grid, progress=JOB.work_hours - 0.1)
    spot_b = Option(grid.keys[1], Mode.SPOT)
    covers = Scored(spot_b, 5.0, stay_hours=0.3 + 0.05)  # 0.1 h of work + 0.2 h cold start fit in it
    short = Scored(spot_b, 5.0, stay_hours=0.2)
    assert next_start_usd(JOB, state, view, covers) == 0.0
    assert next_start_usd(JOB, state, view, short) == pytest.approx(0.2 * 10.0)  # an on-demand start at a's price
    paid = weigh(JOB, state, view, short, bar_usd_per_hour=0.0)
    assert paid.utility_usd_per_hour == pytest.approx(5.0 - 2.0 / 0.2) and not paid.pays


def test_alone_no_next_start_is_charged_and_a_stop_prices_it_at_spot_seen_up_lately():
    grid, alone = flaky_view(up=3, down=3, fleet=False)
    state = on_demand_state(grid)
    short = Scored(Option(grid.keys[1], Mode.SPOT), 5.0, stay_hours=0.5)
    assert next_start_usd(JOB, state, alone, short) == 0.0
    assert next_price_usd_per_hour(JOB, state, alone) == pytest.approx(1.0)  # b's spot, not a's on-demand
    _, fleet = flaky_view(up=3, down=3)
    assert next_start_usd(JOB, state, fleet, short) == pytest.approx(0.2 * 10.0)
    assert next_price_usd_per_hour(JOB, state, fleet) == pytest.approx(10.0)


def test_from_idle_nothing_running_is_left_so_no_restart_is_charged():
    grid, view = flaky_view(up=2, down=2)
    idle = JobState(elapsed_hours=2.0, progress_hours=1.0, checkpoint_market=grid.keys[0])
    assert next_start_usd(JOB, idle, view, Scored(Option(grid.keys[1], Mode.SPOT), 5.0, 0.2)) == 0.0


def test_the_decline_is_said_once_in_plain_words_with_the_numbers_at_debug(caplog):
    grid, view = flaky_view(up=3, down=3)
    state = on_demand_state(grid)
    policy = SkyNomadPolicy(forecaster=Stays(0.5))
    with caplog.at_level(logging.DEBUG, logger="airflow_provider_skynomad.planner.policies.skynomad"):
        policy.decide(JOB, state, view, state.elapsed_hours)
        policy.decide(JOB, state, view, state.elapsed_hours)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert info == [
        f"not launching spot in {grid.keys[1]}: a group there is not expected to stay long enough "
        "to pay for its cold start and the restart after it"
    ]
    assert not any(ch.isdigit() for ch in info[0].replace(grid.keys[1], ""))
    assert len(debug) == 2 and "$/h" in debug[0]


def test_an_on_demand_group_is_stopped_only_when_the_wait_can_save_its_restart():
    grid, view = flaky_view(up=3, down=3)
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=0.0)
    restart = 0.2 * 10.0  # an on-demand cold start in market a
    tight = on_demand_state(grid).advance(elapsed_hours=10.0, progress_hours=0.0)  # no slack left to wait
    assert not stop_pays(job, tight, view, gain_usd_per_hour=1.0, margin=0.1)
    roomy = on_demand_state(grid)  # about 8.6 h of slack to wait in
    assert stop_pays(job, roomy, view, gain_usd_per_hour=1.0, margin=0.1)
    assert not stop_pays(job, roomy, view, gain_usd_per_hour=restart / 20.0, margin=0.0)
    assert not stop_pays(job, roomy, view, gain_usd_per_hour=1.0, margin=1.5)
    spot = roomy.advance(running=Option(grid.keys[1], Mode.SPOT))  # a spot group is not held to it
    assert stop_pays(job, spot.advance(elapsed_hours=10.0, progress_hours=0.0), view, gain_usd_per_hour=0.2, margin=0.1)


def test_in_a_fleet_an_on_demand_group_worth_stopping_alone_is_kept_and_without_the_rule_it_is_stopped():
    # Spot b costs a tenth of on-demand a: to a job with two days of slack, waiting for it looks worth
    # more than on-demand. What the decision falls back on when b is refused: alone, idle (stop and
    # wait); in a fleet, the on-demand group it runs.
    job = JobSpec(work_hours=10.0, deadline_hours=60.0, cold_start_hours=0.2, checkpoint_gb=0.0)
    grid, fleet = flaky_view(up=3, down=3)
    _, alone = flaky_view(up=3, down=3, fleet=False)
    state = on_demand_state(grid)
    on_demand = state.running
    assert keeps_on_demand(state, fleet) and not keeps_on_demand(state, alone)
    assert not keeps_on_demand(state.advance(running=Option(grid.keys[1], Mode.SPOT)), fleet)
    stopped = SkyNomadPolicy(forecaster=Stays(3.0)).decide(job, state, alone, state.elapsed_hours)
    assert stopped.try_in_order[-1] is None
    kept = SkyNomadPolicy(forecaster=Stays(3.0)).decide(job, state, fleet, state.elapsed_hours)
    assert kept.try_in_order[-1] == on_demand
    ablation = SkyNomadPolicy(forecaster=Stays(3.0), payback=False).decide(job, state, fleet, state.elapsed_hours)
    assert ablation.try_in_order[-1] is None

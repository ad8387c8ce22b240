"""In a fleet, on-demand waits until the job's slack is thin (planner/crowding.py); alone nothing changes."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.crowding import (
    ON_DEMAND_RESERVE_STARTS,
    THIN_HOP_SETTLE_HOURS,
    THIN_HOP_STAY_HOURS,
    crowding,
    just_back,
    thin_hop_stay_hours,
)
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.safety import spare_slack_hours
from tests.support.forecasters import Stays

JOB = JobSpec(work_hours=10.0, deadline_hours=14.0, cold_start_hours=0.2, checkpoint_gb=0.0)


def down_view(fleet: bool, ticks: int = 240) -> MarketView:
    """Market a: on-demand only ($10/h). Market b: spot $1/h, up half the time, down now."""
    b = np.resize(np.array([1] * 12 + [0] * 12), ticks)
    b[-1] = 0
    grid = make_grid(np.stack([np.zeros(ticks, dtype=int), b], axis=1), spot=[np.inf, 1.0], on_demand=[10.0, 12.0])
    nobody = np.zeros(0)
    others = Fleet(grid.keys, nobody, nobody, nobody, nobody, nobody) if fleet else None
    return MarketView(grid, ticks - 1, 1, None, flat_egress(2), fleet=others)


def behind(elapsed: float) -> JobState:
    """Idle, far behind its schedule (so on-demand is worth its price), with the slack `elapsed` leaves."""
    return JobState(elapsed_hours=elapsed, progress_hours=0.3, checkpoint_market="us-central1-a")


def test_alone_a_job_behind_schedule_launches_on_demand():
    view = down_view(fleet=False)
    state = behind(2.5)
    decision = SkyNomadPolicy().decide(JOB, state, view, state.elapsed_hours)
    assert decision.try_in_order[-1] == Option("us-central1-a", Mode.ON_DEMAND)  # after a free try of b


def test_in_a_fleet_the_same_job_waits_while_its_slack_pays_for_the_reserve_of_cold_starts():
    view = down_view(fleet=True)
    state = behind(2.5)
    assert spare_slack_hours(JOB, state, view) >= ON_DEMAND_RESERVE_STARTS * JOB.cold_start_hours
    assert not crowding(JOB, state, view).on_demand_open
    decision = SkyNomadPolicy().decide(JOB, state, view, state.elapsed_hours)
    assert decision.try_in_order == (None,)


def test_in_a_fleet_on_demand_opens_once_the_slack_is_thin():
    view = down_view(fleet=True)
    state = behind(3.3)
    spare = spare_slack_hours(JOB, state, view)
    assert 0.0 < spare < ON_DEMAND_RESERVE_STARTS * JOB.cold_start_hours
    assert crowding(JOB, state, view).on_demand_open
    decision = SkyNomadPolicy().decide(JOB, state, view, state.elapsed_hours)
    assert decision.first == Option("us-central1-a", Mode.ON_DEMAND)


@pytest.mark.parametrize("elapsed", [3.6, 3.7])
def test_in_a_fleet_the_safety_net_still_launches_on_demand(elapsed):
    view = down_view(fleet=True)
    state = behind(elapsed)
    decision = SkyNomadPolicy().decide(JOB, state, view, state.elapsed_hours)
    assert decision.first == Option("us-central1-a", Mode.ON_DEMAND)


def up_view(fleet: bool, ticks: int = 240) -> MarketView:
    """As `down_view`, but market b is up now."""
    view = down_view(fleet, ticks)
    grid = view._grid
    grid.available[-1, 1] = 1
    return MarketView(grid, ticks - 1, 1, None, flat_egress(2), fleet=view.fleet)


def on_demand(slack_hours: float, work_left_hours: float = 2.0) -> JobState:
    """On on-demand in a with `work_left_hours` of work left and `slack_hours` of slack (work 10 h, deadline 12.5 h)."""
    a = Option("us-central1-a", Mode.ON_DEMAND)
    return JobState(
        elapsed_hours=12.5 - work_left_hours - slack_hours,
        progress_hours=10.0 - work_left_hours,
        running=a,
        running_since_hours=1.0,
        checkpoint_market=a.market,
    )


@pytest.mark.parametrize("stay_hours, hops", [(1.0, False), (3.0, True)])
def test_in_a_fleet_thin_slack_leaves_on_demand_only_for_a_long_stay(stay_hours, hops):
    assert hops_to_spot(on_demand(0.7), stay_hours) is hops  # 0.7 h: thin


def hops_to_spot(state: JobState, stay_hours: float) -> bool:
    """Whether a fleet job in `state` (its on-demand open) first tries spot in b, every spot stay `stay_hours`."""
    job = JobSpec(work_hours=10.0, deadline_hours=12.5, cold_start_hours=0.2, checkpoint_gb=0.0)
    view = up_view(fleet=True)
    assert crowding(job, state, view).on_demand_open
    decision = SkyNomadPolicy(forecaster=Stays(stay_hours)).decide(job, state, view, state.elapsed_hours)
    return decision.first == Option("us-central1-b", Mode.SPOT)


def test_with_slack_to_spare_or_alone_a_short_stay_still_takes_the_job_off_on_demand():
    job = JobSpec(work_hours=10.0, deadline_hours=12.5, cold_start_hours=0.2, checkpoint_gb=0.0)
    thin = on_demand(0.7)
    # Alone, the fleet's bar is not read; the job's own form of it (thin_hops, test_thin_hops.py) is turned off here.
    alone = SkyNomadPolicy(forecaster=Stays(1.0), thin_hops=False)
    assert alone.decide(job, thin, up_view(fleet=False), thin.elapsed_hours).first == Option("us-central1-b", Mode.SPOT)
    spare = on_demand(2.0)  # on-demand is not open: the hop is weighed as before
    view = up_view(fleet=True)
    assert not crowding(job, spare, view).on_demand_open
    decision = SkyNomadPolicy(forecaster=Stays(1.0)).decide(job, spare, view, spare.elapsed_hours)
    assert decision.first == Option("us-central1-b", Mode.SPOT)


def near_the_end(slack_hours: float) -> JobState:
    """As `on_demand`, with 0.8 h of work left: its rest, with a spot launch's 0.2 h cold start, is 1 h."""
    return on_demand(slack_hours, work_left_hours=0.8)


def test_the_long_stay_a_thin_hop_needs_is_at_most_the_rest_of_the_job():
    job = JobSpec(work_hours=10.0, deadline_hours=12.5, cold_start_hours=0.2, checkpoint_gb=0.0)
    view = up_view(fleet=True)
    assert thin_hop_stay_hours(job, on_demand(0.7), view) == pytest.approx([THIN_HOP_STAY_HOURS] * 2)
    assert thin_hop_stay_hours(job, near_the_end(0.7), view) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("stay_hours, hops", [(0.9, False), (1.1, True)])
def test_in_a_fleet_thin_slack_near_the_end_leaves_on_demand_for_a_stay_that_finishes_the_job(stay_hours, hops):
    assert hops_to_spot(near_the_end(0.7), stay_hours) is hops


def refused_a_step_ago(now_seen: bool = False) -> MarketView:
    """Market b (spot, one instance) was up until the previous step, when a launch there was refused (seen 0);
    this step it is unseen, or with `now_seen` seen full again."""
    b = np.ones(240, dtype=int)
    b[-2:] = 0
    return unseen_view(b, 0 if now_seen else 1)


def test_a_market_refused_a_step_ago_is_worth_another_free_try():
    state = JobState(elapsed_hours=1.0, progress_hours=0.5)
    assert crowding(JOB, state, refused_a_step_ago()).launchable[1]


def test_a_market_seen_full_at_this_step_is_not_launchable():
    state = JobState(elapsed_hours=1.0, progress_hours=0.5)
    assert not crowding(JOB, state, refused_a_step_ago(now_seen=True)).launchable[1]


def unseen_view(b: np.ndarray, unseen_ticks: int) -> MarketView:
    """A fleet job's view (nobody else in it): market a on-demand only, market b spot with availability `b`;
    the job observed every market until `unseen_ticks` ago and since then only a (where it runs on-demand)."""
    ticks = len(b)
    grid = make_grid(np.stack([np.zeros(ticks, dtype=int), b], axis=1), spot=[np.inf, 1.0], on_demand=[10.0, 12.0])
    seen = np.ones(grid.available.shape, dtype=bool)
    seen[ticks - unseen_ticks :, 1] = False
    nobody = np.zeros(0)
    others = Fleet(grid.keys, nobody, nobody, nobody, nobody, nobody)
    return MarketView(grid, ticks - 1, 1, seen, flat_egress(2), fleet=others)


@pytest.mark.parametrize("unseen_ticks, launchable", [(0, False), (1, True), (30, True)])
def test_a_market_the_job_has_not_observed_since_it_saw_it_down_is_worth_a_free_try(unseen_ticks, launchable):
    # b was down in every observation of the last 48 h: a job on on-demand, which observes no spot market, must
    # not take its last sight of b for b's capacity now (it stayed "down" to it for 48 h while it came back).
    view = unseen_view(np.zeros(240, dtype=int), unseen_ticks)  # still down now: the try is free all the same
    assert bool(crowding(JOB, on_demand(0.7), view).launchable[1]) is launchable  # seen down this step: not


@pytest.mark.parametrize("unseen_ticks, hops", [(2, False), (3, False), (4, True), (12, True)])
def test_thin_slack_does_not_leave_on_demand_for_a_market_seen_down_within_the_settle_time(unseen_ticks, hops):
    b = np.resize(np.array([1] * 12 + [0] * 12), 240)  # down in its last 12 ticks, as the job last saw it
    b[-1] = 1
    view = unseen_view(b, unseen_ticks)
    age_hours = unseen_ticks * view.step_hours
    assert bool(just_back(view)[1]) is (age_hours <= THIN_HOP_SETTLE_HOURS + 1e-9)
    job = JobSpec(work_hours=10.0, deadline_hours=12.5, cold_start_hours=0.2, checkpoint_gb=0.0)
    state = on_demand(0.7)
    assert crowding(job, state, view).on_demand_open and crowding(job, state, view).launchable[1]
    decision = SkyNomadPolicy(forecaster=Stays(3.0)).decide(job, state, view, state.elapsed_hours)
    assert (decision.first == Option("us-central1-b", Mode.SPOT)) is hops

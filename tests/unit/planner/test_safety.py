"""The safety net (is_safe, cheapest_on_demand), utility U and the job vocabulary."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobSpecError, JobState
from airflow_provider_skynomad.planner.registry import POLICIES, get_policy
from airflow_provider_skynomad.planner.safety import (
    cheapest_on_demand,
    is_safe,
    launch_delay_hours,
    launch_delays_hours,
    outlives_warmup,
)
from airflow_provider_skynomad.planner.utility import migration_pays, score, score_all
from airflow_provider_skynomad.simulation.simulator import simulate

STEP = 1 / 6


def view_of(spot=(1.0, 2.0, 3.0), on_demand=(8.0, 6.0, 9.0), ticks=40, tick=10, available=None, egress=None):
    n = len(spot)
    available = np.ones((ticks, n), bool) if available is None else available
    grid = make_grid(available, spot, on_demand)
    return MarketView(grid, tick, 1, None, flat_egress(n) if egress is None else egress)


def spot(key):
    return Option(key, Mode.SPOT)


def od(key):
    return Option(key, Mode.ON_DEMAND)


# --------------------------------------------------------------------------- is_safe


def test_idle_is_safe_exactly_while_one_more_step_still_leaves_an_on_demand_rescue():
    view = view_of()
    job = JobSpec(work_hours=4.0, deadline_hours=6.0, cold_start_hours=0.2)
    # remaining 4 - p, rescue = that + d, after one idle step
    for p, _t in [(0.0, 1.0), (1.0, 2.0), (2.5, 3.5)]:
        limit = job.deadline_hours - STEP - (job.work_hours - p) - job.cold_start_hours
        assert is_safe(job, JobState(elapsed_hours=limit - 1e-6, progress_hours=p), view, IDLE)
        assert not is_safe(job, JobState(elapsed_hours=limit + 1e-6, progress_hours=p), view, IDLE)


def test_the_drivers_reaction_lag_moves_the_last_safe_idle_step_earlier_by_two_lags():
    # Idle may be the fallback of an event the worker carries out a lag late; the rescue is
    # decided after that and carried out another lag later.
    view = view_of()
    lag = 0.75
    job = JobSpec(work_hours=4.0, deadline_hours=6.0, cold_start_hours=0.2, reaction_hours=lag)
    limit = job.deadline_hours - STEP - 2 * lag - job.work_hours - job.cold_start_hours
    assert is_safe(job, JobState(elapsed_hours=limit - 1e-6), view, IDLE)
    assert not is_safe(job, JobState(elapsed_hours=limit + 1e-6), view, IDLE)
    # Without the lag the same moment is still safe: the margin is the lags, nothing else.
    assert is_safe(
        JobSpec(work_hours=4.0, deadline_hours=6.0, cold_start_hours=0.2),
        JobState(elapsed_hours=limit + 1e-6),
        view,
        IDLE,
    )
    with pytest.raises(JobSpecError, match="reaction_hours"):
        JobSpec(work_hours=1.0, deadline_hours=2.0, reaction_hours=-0.1)


@pytest.mark.parametrize("name", ["skynomad", "eager-failover"])
def test_policies_that_wait_for_spot_turn_to_on_demand_earlier_by_the_reaction_lag(name):
    # Spot is never available: the policy waits (or keeps trying spot), then must go on-demand
    # while a rescue carried out `reaction` late still finishes in time.
    view = view_of(available=np.zeros((40, 3), bool))
    firsts = {}
    for reaction in (0.0, 0.5):
        job = JobSpec(work_hours=2.0, deadline_hours=4.0, cold_start_hours=0.2, reaction_hours=reaction)
        policy = get_policy(name)

        def on_demand_at(t, policy=policy, job=job):
            first_choice = (policy.decide(job, JobState(elapsed_hours=t), view, t).try_in_order or [IDLE])[0]
            return first_choice is not IDLE and first_choice.mode is Mode.ON_DEMAND

        first = next(t for t in np.arange(0.0, 4.0, STEP) if on_demand_at(t))
        assert first + reaction + job.cold_start_hours + job.work_hours <= job.deadline_hours + 1e-9
        firsts[reaction] = first
    # Earlier by the lags the rescue may wait (between one and two of them, within a step).
    assert firsts[0.0] - 2 * 0.5 - STEP < firsts[0.5] <= firsts[0.0] - 0.5 + 1e-9


def test_a_change_is_carried_out_a_reaction_lag_late_and_so_is_its_rescue():
    view = view_of()
    k = view.keys[0]
    lag = 0.5
    job = JobSpec(work_hours=4.0, deadline_hours=6.0, cold_start_hours=0.2, reaction_hours=lag)
    # On-demand launched now starts `lag` late: it must still finish.
    limit = job.deadline_hours - lag - job.cold_start_hours - job.work_hours
    assert is_safe(job, JobState(elapsed_hours=limit - 1e-6), view, od(k))
    assert not is_safe(job, JobState(elapsed_hours=limit + 1e-6), view, od(k))
    # A spot launch: starts a lag late, makes one step of progress after its warm-up, is lost, and the
    # rescue starts one step and another lag after that.
    progress = STEP - job.cold_start_hours if job.cold_start_hours < STEP else 0.0
    limit = job.deadline_hours - 2 * lag - STEP - (job.work_hours - progress) - job.cold_start_hours
    assert is_safe(job, JobState(elapsed_hours=limit - 1e-6), view, spot(k))
    assert not is_safe(job, JobState(elapsed_hours=limit + 1e-6), view, spot(k))
    # Staying on what runs is no change: it starts now, so the same moment leaves it room.
    running = JobState(elapsed_hours=limit + 1e-6, running=spot(k), checkpoint_market=k)
    assert is_safe(job, running, view, spot(k))


def test_on_demand_only_has_to_finish_itself():
    view = view_of()
    job = JobSpec(work_hours=4.0, deadline_hours=5.0, cold_start_hours=0.2)
    k = view.keys[0]
    assert is_safe(job, JobState(elapsed_hours=0.8, progress_hours=0.0), view, od(k))
    assert not is_safe(job, JobState(elapsed_hours=0.81, progress_hours=0.0), view, od(k))
    # Already running on-demand there: only its remaining warm-up counts.
    running = JobState(elapsed_hours=0.9, progress_hours=0.0, running=od(k), warmup_left_hours=0.1, checkpoint_market=k)
    assert is_safe(job, running, view, od(k))
    assert not is_safe(job, running, view, od(view.keys[1]))  # a new group pays the full cold start


def test_spot_counts_the_progress_of_this_step_only_after_its_warm_up():
    view = view_of()
    job = JobSpec(work_hours=4.0, deadline_hours=5.0, cold_start_hours=0.1)
    k = view.keys[0]
    # launching: progress this step = STEP - 0.1; worst case then rescue with another cold start
    t_limit = job.deadline_hours - STEP - (job.work_hours - (STEP - 0.1)) - 0.1
    assert is_safe(job, JobState(elapsed_hours=t_limit - 1e-6), view, spot(k))
    assert not is_safe(job, JobState(elapsed_hours=t_limit + 1e-6), view, spot(k))
    # staying warm on it makes a full step of progress
    warm = JobState(elapsed_hours=t_limit + 0.05, progress_hours=0.0, running=spot(k), checkpoint_market=k)
    assert is_safe(job, warm, view, spot(k))
    # finishing within this step is always safe
    assert is_safe(
        job, JobState(elapsed_hours=4.9, progress_hours=3.95, running=spot(k), checkpoint_market=k), view, spot(k)
    )


def test_with_a_bandwidth_a_move_also_costs_transfer_time():
    view = view_of()
    job = JobSpec(work_hours=4.0, deadline_hours=5.0, cold_start_hours=0.2, checkpoint_gb=50, bandwidth_gb_per_hour=100)
    a, b = view.keys[:2]
    state = JobState(elapsed_hours=0.5, checkpoint_market=a)
    assert launch_delay_hours(job, state, view, view.index(a)) == pytest.approx(0.2)
    assert launch_delay_hours(job, state, view, view.index(b)) == pytest.approx(0.7)
    assert list(launch_delays_hours(job, state, view)[:2]) == pytest.approx([0.2, 0.7])
    # before the first checkpoint nothing moves: every market is a bare cold start
    assert launch_delay_hours(job, JobState(elapsed_hours=0.5), view, view.index(b)) == pytest.approx(0.2)
    assert is_safe(job, state, view, od(a))
    assert not is_safe(job, state, view, od(b))


# --------------------------------------------------------------------------- T = P + d


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_with_no_slack_every_policy_goes_on_demand_at_once(name):
    view = view_of(tick=0)
    job = JobSpec(work_hours=2.0, deadline_hours=2.2, cold_start_hours=0.2, checkpoint_gb=50)
    params = {"zone": view.keys[0]} if name == "uniform-progress" else {}
    decision = get_policy(name, **params).decide(job, JobState(), view, 0.0)
    first = decision.try_in_order[0]
    assert first is not None and first.mode is Mode.ON_DEMAND, decision


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_with_no_slack_every_policy_runs_on_demand_start_to_end(name):
    spot_prices, od_prices = (1.0, 2.0, 3.0), (8.0, 6.0, 9.0)
    grid = make_grid(np.ones((40, 3), bool), spot_prices, od_prices)
    job = JobSpec(work_hours=2.0, deadline_hours=2.2, cold_start_hours=0.2, checkpoint_gb=50)
    params = {"zone": grid.keys[2]} if name == "uniform-progress" else {}
    result = simulate(get_policy(name, **params), job, grid, 10, flat_egress(3))
    assert result.met_deadline
    assert result.spot_usd == 0 and result.launches == 1 and result.migrations == 0
    expected_price = od_prices[2] if name == "uniform-progress" else min(od_prices)
    assert result.on_demand_usd == pytest.approx(expected_price * 2.2)
    assert result.on_demand_hours == pytest.approx(2.2)


def test_skynomad_does_not_pay_probes_it_cannot_use():
    """On the safety net with no slack nothing learnt by a probe can be used (paid probes at ba04751)."""
    grid = make_grid(np.ones((40, 3), bool), (1.0, 2.0, 3.0), (8.0, 6.0, 9.0))
    job = JobSpec(work_hours=2.0, deadline_hours=2.2, cold_start_hours=0.2, checkpoint_gb=50)
    result = simulate(get_policy("skynomad", probe_interval_hours=2.0), job, grid, 10, flat_egress(3))
    assert result.probe_usd == 0


def _stuck_away_from_the_cheapest_market():
    """Market 0 is cheapest but full at the start; once the job runs elsewhere, egress ($500) pins it there."""
    available = np.ones((60, 3), bool)
    available[:3, 0] = False
    grid = make_grid(available, (1.0, 2.0, 3.0), (8.0, 9.0, 10.0))
    job = JobSpec(work_hours=5.0, deadline_hours=8.0, cold_start_hours=0.2, checkpoint_gb=50)
    return grid, job, flat_egress(3, usd_per_gb=10.0)


def test_skynomad_probes_stale_cheaper_markets_at_the_papers_cadence_and_pays_for_them():
    grid, job, egress = _stuck_away_from_the_cheapest_market()
    result = simulate(get_policy("skynomad", probe_interval_hours=2.0), job, grid, 0, egress, history=False)
    assert result.met_deadline and result.migrations == 0
    # one minute of market 0's spot per probe, at least one every 2 h of the run
    assert result.probe_usd >= 2 * job.probe_hours * 1.0


def test_skynomad_does_not_probe_by_default():
    grid, job, egress = _stuck_away_from_the_cheapest_market()
    assert simulate(get_policy("skynomad"), job, grid, 0, egress, history=False).probe_usd == 0


# --------------------------------------------------------------------------- cheapest on-demand


def test_cheapest_on_demand_weighs_price_over_the_remaining_work_against_egress():
    egress = np.array([[0.0, 0.01, 0.08], [0.01, 0.0, 0.08], [0.08, 0.08, 0.0]])
    view = view_of(on_demand=(10.0, 10.2, 9.0), egress=egress)
    a, b, c = view.keys
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=100)
    # No checkpoint yet: the cheapest price wins.
    assert cheapest_on_demand(job, JobState(), view) == od(c)
    # Checkpoint in b, 1 h left: moving to c saves (10.2-9)*1.2 = 1.44 but costs 100*0.08 = 8 → stay in b.
    near_end = JobState(elapsed_hours=15, progress_hours=9.0, checkpoint_market=b)
    assert cheapest_on_demand(job, near_end, view) == od(b)
    # 9.8 h left: c saves 1.2*10 = 12 > 8 → move.
    early = JobState(elapsed_hours=1, progress_hours=0.2, checkpoint_market=b)
    assert cheapest_on_demand(job, early, view) == od(c)
    # Checkpoint in a, 1 h left: a (10*1.2 = 12) vs b (10.2*1.2 + 1 = 13.24) vs c (9*1.2 + 8) → a.
    assert cheapest_on_demand(job, JobState(elapsed_hours=15, progress_hours=9.0, checkpoint_market=a), view) == od(a)


def test_cheapest_on_demand_stays_on_a_running_on_demand_group():
    view = view_of(on_demand=(10.0, 1.0, 9.0))
    a = view.keys[0]
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2)
    state = JobState(elapsed_hours=1, progress_hours=1, running=od(a), checkpoint_market=a)
    assert cheapest_on_demand(job, state, view) == od(a)


def test_cheapest_on_demand_skips_zones_whose_transfer_would_miss_the_deadline():
    view = view_of(on_demand=(10.0, 1.0, 9.0))
    a, b, _ = view.keys
    job = JobSpec(
        work_hours=10.0, deadline_hours=11.0, cold_start_hours=0.2, checkpoint_gb=100, bandwidth_gb_per_hour=100
    )  # a move adds 1 h
    state = JobState(elapsed_hours=0.5, progress_hours=0.0, checkpoint_market=a)
    assert cheapest_on_demand(job, state, view) == od(a)
    assert cheapest_on_demand(job, state.advance(elapsed_hours=0.0, progress_hours=0.1), view) == od(a)
    # 9.5 + 1.2 ≤ 11
    assert cheapest_on_demand(job, state.advance(elapsed_hours=0.0, progress_hours=0.5), view) == od(b)
    relaxed = JobSpec(10.0, 13.0, 0.2, 100, bandwidth_gb_per_hour=100)
    assert cheapest_on_demand(relaxed, state, view) == od(b)
    # The move is launched a driver lag late: 0.3 h of lag makes b's 9.5 + 1.2 miss 11 h.
    ahead = state.advance(elapsed_hours=0.0, progress_hours=0.5)
    assert cheapest_on_demand(replace(job, reaction_hours=0.29), ahead, view) == od(b)
    assert cheapest_on_demand(replace(job, reaction_hours=0.31), ahead, view) == od(a)


# --------------------------------------------------------------------------- utility


def test_on_demand_utility_spreads_its_cold_start_over_the_rest_of_the_job():
    view = view_of(on_demand=(8.0, 6.0, 9.0))
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=0)
    s = score(
        job, JobState(progress_hours=2.0), view, od(view.keys[1]), value_usd_per_hour=7.0, spot_lifetime_hours=1.0
    )
    eta = 8.0 / 8.2
    assert s.stay_hours == pytest.approx(8.2)
    assert s.useful_share == pytest.approx(eta)
    assert s.utility_usd_per_hour == pytest.approx(7.0 * eta - 6.0)


def test_spot_utility_uses_the_lifetime_the_useful_share_and_amortised_egress():
    egress = flat_egress(3, 0.05)
    view = view_of(spot=(1.0, 2.0, 3.0), egress=egress)
    a, b, _ = view.keys
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=40)
    state = JobState(elapsed_hours=1, progress_hours=1, checkpoint_market=a)
    s = score(job, state, view, spot(b), value_usd_per_hour=6.0, spot_lifetime_hours=2.0)
    eta = (2.0 - 0.2) / 2.0
    assert s.useful_share == pytest.approx(eta)
    assert s.utility_usd_per_hour == pytest.approx(6.0 * eta - 2.0 - 40 * 0.05 / 2.0)
    # A lifetime shorter than the cold start is worth nothing but costs its price.
    short = score(job, state, view, spot(b), 6.0, 0.1)
    assert short.useful_share == 0.0 and short.utility_usd_per_hour == pytest.approx(-2.0 - 40 * 0.05 / 0.1)


def test_staying_pays_neither_cold_start_nor_egress():
    view = view_of(spot=(1.0, 2.0, 3.0), egress=flat_egress(3, 0.05))
    b = view.keys[1]
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=40)
    state = JobState(elapsed_hours=2, progress_hours=1.5, running=spot(b), running_since_hours=1, checkpoint_market=b)
    s = score(job, state, view, spot(b), 6.0, 2.0)
    assert s.useful_share == 1.0
    assert s.utility_usd_per_hour == pytest.approx(6.0 - 2.0)


def test_scoring_every_option_at_once_prices_each_cell_by_where_the_checkpoint_and_the_group_are():
    view = view_of(spot=(1.0, 2.0, math.inf), on_demand=(8.0, 6.0, 9.0), egress=flat_egress(3, 0.05))
    a, b, c = view.keys
    # 40 GB at 100 GB/h: a launch away from the checkpoint (in a) also waits 0.4 h for the copy.
    job = JobSpec(
        work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=40, bandwidth_gb_per_hour=100.0
    )
    state = JobState(
        elapsed_hours=2,
        progress_hours=2.0,
        running=od(b),
        running_since_hours=1,
        warmup_left_hours=0.1,
        checkpoint_market=a,
    )
    scores = score_all(job, state, view, np.array([2.0, 3.0, 3.0]), on_demand_stay_hours=5.0)
    spot_a, spot_b, od_b = scores.scored(spot(a), 6.0), scores.scored(spot(b), 6.0), scores.scored(od(b), 6.0)
    assert spot_a.useful_share == pytest.approx(1.8 / 2.0)  # relaunch next to the checkpoint: cold start only
    assert spot_a.cost_usd_per_hour == pytest.approx(1.0)
    assert spot_b.useful_share == pytest.approx(2.4 / 3.0)  # cold start and the copy
    assert spot_b.cost_usd_per_hour == pytest.approx(2.0 + 40 * 0.05 / 3.0)
    # The running on-demand group only finishes its warm-up and pays no egress.
    assert od_b.useful_share == pytest.approx(4.9 / 5.0) and od_b.cost_usd_per_hour == pytest.approx(6.0)
    assert od_b.utility_usd_per_hour == pytest.approx(6.0 * 4.9 / 5.0 - 6.0)
    # A market with no spot price cannot be launched: worth -inf, and never the cheapest progress.
    assert scores.scored(spot(c), 6.0).utility_usd_per_hour == -math.inf
    assert scores.cost_per_progress_hour(Mode.SPOT)[2] == math.inf
    assert scores.utility(6.0)[2, 0] == -math.inf
    # U is linear in V: the arrays agree with the per-option view at any V.
    for v in (0.0, 3.0, 12.0):
        assert scores.utility(v)[1, 1] == pytest.approx(scores.scored(od(b), v).utility_usd_per_hour)


def test_migration_pays_only_when_the_saving_over_the_useful_stay_beats_egress():
    view = view_of(spot=(3.0, 2.0, 2.9), egress=flat_egress(3, 0.02))
    a, b, c = view.keys
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=50)
    # egress 1.0 $; saving a→b 1 $/h × (L − 0.2)
    assert migration_pays(job, view, a, b, 1.2)
    assert not migration_pays(job, view, a, b, 1.1)
    assert not migration_pays(job, view, a, c, 2.0)  # 0.1 $/h × 1.8 h < 1 $


# --------------------------------------------------------------------------- vocabulary


def test_job_spec_checks_and_feasibility():
    assert JobSpec(2.0, 2.2, 0.2).feasible
    assert not JobSpec(2.0, 2.1, 0.2).feasible
    with pytest.raises(JobSpecError, match="extend the deadline"):
        JobSpec(2.0, 2.1, 0.2).require_feasible()
    for bad in [
        dict(work_hours=0, deadline_hours=1),
        dict(work_hours=1, deadline_hours=-1),
        dict(work_hours=1, deadline_hours=2, cold_start_hours=-0.1),
        dict(work_hours=1, deadline_hours=2, instances=0),
        dict(work_hours=1, deadline_hours=2, bandwidth_gb_per_hour=0),
    ]:
        with pytest.raises(JobSpecError):
            JobSpec(**bad)
    # Infinite values pass a "> 0" test and only fail deep inside a run (an infinite lag, checkpoint or deadline).
    for name in ("deadline_hours", "checkpoint_gb", "reaction_hours", "bandwidth_gb_per_hour"):
        with pytest.raises(JobSpecError, match=f"{name} must be a finite number"):
            JobSpec(**{"work_hours": 1.0, "deadline_hours": 2.0, name: math.inf})


def test_decision_and_state_round_trip_through_plain_data():
    decision = Decision((spot("a"), None, od("b")), probes=("c",), reason="why")
    assert Decision.from_dict(decision.to_dict()) == decision
    state = JobState(1.0, 0.5, od("b"), 0.5, 0.1, "b", "a")
    assert JobState.from_dict(state.to_dict()) == state
    assert state.age_hours() == pytest.approx(0.5)
    assert JobState(elapsed_hours=3.0, running_since_hours=1.0).age_hours() == 0.0  # idle has no age


def test_registry_builds_every_policy_and_names_the_choices_on_a_typo():
    for name in POLICIES:
        params = {"zone": "z"} if name == "uniform-progress" else {}
        assert get_policy(name, **params).name == name
    with pytest.raises(ValueError, match="skynomad"):
        get_policy("skynomads")


def test_unsafe_idle_when_out_of_time_is_not_nan():
    view = view_of()
    job = JobSpec(work_hours=4.0, deadline_hours=5.0, cold_start_hours=0.2)
    state = JobState(elapsed_hours=6.0, progress_hours=1.0)
    assert not is_safe(job, state, view, IDLE)
    assert not is_safe(job, state, view, od(view.keys[0]))
    assert math.isfinite(launch_delay_hours(job, state, view, 0))


def test_finishing_within_the_step_before_the_deadline_is_safe():
    view = view_of()
    a = view.keys[0]
    job = JobSpec(work_hours=1.0, deadline_hours=1.5, cold_start_hours=0.1)
    state = JobState(elapsed_hours=7 / 6, progress_hours=0.95, running=od(a), checkpoint_market=a)
    assert is_safe(job, state, view, spot(a))  # 7/6 + 0.1 + 0.05 ≤ 1.5


def test_finishing_within_the_step_after_the_deadline_is_not_safe():
    """The deadline can fall inside the last step.

    (Was a bug at ba04751: 'finishes within this step' was always safe.)
    """
    view = view_of()
    a = view.keys[0]
    job = JobSpec(work_hours=1.0, deadline_hours=1.25, cold_start_hours=0.1)
    state = JobState(elapsed_hours=7 / 6, progress_hours=0.95, running=od(a), checkpoint_market=a)
    # A new spot group here finishes at 7/6 + 0.1 + 0.05 = 1.317 h > T = 1.25 h; staying on-demand finishes at 1.217 h.
    assert is_safe(job, state, view, od(a))
    assert not is_safe(job, state, view, spot(a))


def test_cheapest_on_demand_breaks_a_price_tie_toward_the_zone_with_the_cheapest_spot():
    """Same-region zones tie on on-demand price; from the one whose spot is cheapest, a return to spot needs no move."""
    view = view_of(spot=(3.0, 1.0, 2.0), on_demand=(8.0, 8.0, 8.0))
    job = JobSpec(work_hours=10.0, deadline_hours=20.0, cold_start_hours=0.2, checkpoint_gb=0)
    assert cheapest_on_demand(job, JobState(), view) == od(view.keys[1])
    # A real price difference still wins over the tie-break.
    cheaper = view_of(spot=(3.0, 1.0, 2.0), on_demand=(7.99, 8.0, 8.0))
    assert cheapest_on_demand(job, JobState(), cheaper) == od(cheaper.keys[0])


def test_a_launch_the_net_would_drop_inside_its_warm_up_does_not_outlive_it():
    """d = 0.3 h > one step: a launch safe now must still be safe to keep when its warm-up ends."""
    view = view_of()
    k = view.keys[0]
    job = JobSpec(work_hours=4.0, deadline_hours=5.0, cold_start_hours=0.3)
    # Safe now needs t + step + P + d ≤ T; keeping it to the end of its warm-up needs t + d + P + d ≤ T.
    doomed = JobState(elapsed_hours=job.deadline_hours - STEP - 4.0 - 0.3 - 1e-6)
    assert is_safe(job, doomed, view, spot(k))
    assert not outlives_warmup(job, doomed, view, spot(k))
    kept = JobState(elapsed_hours=job.deadline_hours - 0.3 - 4.0 - 0.3 - 1e-6)
    assert is_safe(job, kept, view, spot(k)) and outlives_warmup(job, kept, view, spot(k))
    # On-demand is never dropped, and a warm-up within one step has nothing to outlive.
    assert outlives_warmup(job, doomed, view, od(k))
    short = replace(job, cold_start_hours=0.1)
    assert outlives_warmup(short, JobState(elapsed_hours=0.85), view, spot(k))

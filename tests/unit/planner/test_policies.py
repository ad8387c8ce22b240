"""Policies: well-formed, safe decisions on random states; eager-failover order; uniform progress stays on spot."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skynomad_synth import STEP_HOURS, flat_egress, grids, jobs, make_grid, markets, segment_mode

from airflow_provider_skynomad.market.grid import Market
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.planner.safety import is_safe
from airflow_provider_skynomad.simulation.simulator import simulate

POLICY_NAMES = ["skynomad", "on-demand", "uniform-progress", "eager-failover"]


@st.composite
def situations(draw):
    """(policy name, params, job, state, view) with a consistent random state on a random market view."""
    job = draw(jobs(feasible=True))
    grid = draw(grids(ticks=30))
    keys = grid.keys
    name = draw(st.sampled_from(POLICY_NAMES))
    params = {}
    allowed = keys
    if name == "uniform-progress":
        params = {"zone": draw(st.sampled_from(keys))}
        allowed = [params["zone"]]
    tick = draw(st.integers(0, grid.ticks - 1))
    T, P, d = job.deadline_hours, job.work_hours, job.cold_start_hours
    t = round(draw(st.floats(0.0, 0.999)) * T / STEP_HOURS) * STEP_HOURS
    p = min(draw(st.floats(0.0, 0.999)) * P, P * 0.999)
    running = draw(st.one_of(st.none(), st.builds(Option, st.sampled_from(allowed), st.sampled_from(list(Mode)))))
    on_spot = running is not None and running.mode is Mode.SPOT
    if on_spot and not grid.usable(job.instances)[tick, keys.index(running.market)]:
        running = None  # the simulator never asks with a lost spot group still "running"
    warmup = draw(st.floats(0.0, d)) if running else 0.0
    since = draw(st.floats(0.0, t)) if running else 0.0
    checkpoint = running.market if running else draw(st.one_of(st.none(), st.sampled_from(allowed)))
    preempted = draw(st.one_of(st.none(), st.sampled_from(keys)))
    state = JobState(t, p, running, since, warmup, checkpoint, preempted)
    seen = None
    if draw(st.booleans()):
        seen = np.random.default_rng(draw(st.integers(0, 1000))).random(grid.available.shape) < 0.3
    view = MarketView(grid, tick, job.instances, seen, flat_egress(len(keys)))
    return name, params, job, state, view


def _rescuable(job: JobSpec, state: JobState, view: MarketView) -> bool:
    """On-demand can still finish from here (by launching, or by staying on a running on-demand group)."""
    remaining = job.work_hours - state.progress_hours
    on_demand = state.running is not None and state.running.mode is Mode.ON_DEMAND
    if on_demand and state.elapsed_hours + state.warmup_left_hours + remaining <= job.deadline_hours + 1e-9:
        return True
    return state.elapsed_hours + job.cold_start_hours + remaining <= job.deadline_hours + 1e-9


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(situations())
def test_every_decision_is_well_formed_and_safe(situation):
    name, params, job, state, view = situation
    decision = get_policy(name, **params).decide(job, state, view, state.elapsed_hours)
    assert isinstance(decision, Decision)
    assert decision.try_in_order, "a decision must say what to run"
    for option in decision.try_in_order:
        assert option is None or (
            isinstance(option, Option) and option.market in view.keys and isinstance(option.mode, Mode)
        )
    for market in decision.probes:
        assert market in view.keys
    # The list ends with something that cannot fail to "launch": idle, on-demand, or the running group.
    last = decision.try_in_order[-1]
    assert last is None or last.mode is Mode.ON_DEMAND or last == state.running, decision
    # Nothing is listed after a sure option (it would never be tried).
    for option in decision.try_in_order[:-1]:
        assert option is not None and option.mode is Mode.SPOT and option != state.running, decision
    assert Decision.from_dict(decision.to_dict()) == decision
    if name == "uniform-progress":
        assert {o.market for o in decision.try_in_order if o} <= {params["zone"]}
    if name == "on-demand":
        assert all(o is not None and o.mode is Mode.ON_DEMAND for o in decision.try_in_order)
    # Safety: whenever on-demand can still finish, every option the policy may end up with keeps that true.
    if _rescuable(job, state, view):
        for option in decision.try_in_order:
            assert is_safe(job, state, view, option), (option, decision)


# --------------------------------------------------------------------------- eager failover


def _failover_view(prices, regions):
    ms = tuple(Market(f"{r}-{chr(97 + j)}", "gcp", r, f"{r}-{chr(97 + j)}", "t") for j, r in enumerate(regions))
    grid = make_grid(np.ones((20, len(prices)), bool), prices, 20.0, market_list=ms)
    return MarketView(grid, 5, 1, None, flat_egress(len(prices)))


def _spot_tries(decision):
    return [o.market for o in decision.try_in_order if o is not None and o.mode is Mode.SPOT]


def test_eager_failover_tries_cheapest_spot_first_and_the_preempted_region_last():
    prices = [2.0, 1.0, 3.0, 1.5, 0.5]
    regions = ["us-central1", "us-central1", "europe-west1", "asia-south2", "us-east1"]
    view = _failover_view(prices, regions)
    k = view.keys
    job = JobSpec(work_hours=4.0, deadline_hours=8.0, cold_start_hours=0.2)
    ahead = JobState(elapsed_hours=1.0, progress_hours=1.0)  # ahead of the uniform line, plenty of slack
    policy = get_policy("eager-failover")
    # No preemption yet: plain price order.
    assert _spot_tries(policy.decide(job, ahead, view, 1.0)) == [k[4], k[1], k[3], k[0], k[2]]
    # Preempted in us-central1 (the 1.0 $/h zone): both us-central1 zones go last, price order kept.
    after = ahead.advance(last_preempted_market=k[1], checkpoint_market=k[1])
    assert _spot_tries(policy.decide(job, after, view, 1.0)) == [k[4], k[3], k[2], k[1], k[0]]


def test_eager_failover_falls_back_to_on_demand_when_behind_and_idle_when_ahead():
    view = _failover_view([2.0, 1.0], ["us-central1", "europe-west1"])
    job = JobSpec(work_hours=4.0, deadline_hours=8.0, cold_start_hours=0.2)
    policy = get_policy("eager-failover")
    behind = policy.decide(job, JobState(elapsed_hours=2.0, progress_hours=0.5), view, 2.0)
    assert behind.try_in_order[-1] is not None and behind.try_in_order[-1].mode is Mode.ON_DEMAND
    ahead = policy.decide(job, JobState(elapsed_hours=2.0, progress_hours=1.5), view, 2.0)
    assert ahead.try_in_order[-1] is IDLE


def test_eager_failover_only_moves_when_preempted():
    # Zone a (expensive) always has capacity; zone b (cheap) gets capacity after 1 h and keeps it.
    available = np.ones((60, 2), bool)
    available[:6, 1] = False
    grid = make_grid(available, [3.0, 1.0], [10.0, 10.0])
    job = JobSpec(work_hours=3.0, deadline_hours=6.0, cold_start_hours=0.2, checkpoint_gb=0)
    result = simulate(get_policy("eager-failover"), job, grid, 0, flat_egress(2))
    assert result.met_deadline
    assert [s.option for s in result.segments] == ["spot(us-central1-a)"]
    assert result.migrations == 0
    # Preempt a at 1.5 h: it moves to b (cheapest available) and stays there.
    available[9:, 0] = False
    result = simulate(
        get_policy("eager-failover"), job, make_grid(available, [3.0, 1.0], [10.0, 10.0]), 0, flat_egress(2)
    )
    assert [(s.option, s.ended_by) for s in result.segments] == [
        ("spot(us-central1-a)", "preempted"),
        ("spot(us-central1-b)", "finished"),
    ]
    assert result.segments[1].start_hours == pytest.approx(1.5)


# --------------------------------------------------------------------------- uniform progress


def test_uniform_progress_stays_on_spot_until_preempted():
    # One zone, spot available for 1.5 h, gone for 0.5 h, then back; prices change but it never leaves voluntarily.
    available = np.ones((60, 1), bool)
    available[9:12] = False
    spot = np.full((60, 1), 1.0)
    spot[3:] = 4.0  # spot gets expensive (still cheaper than on-demand): stays anyway
    grid = make_grid(available, spot, 5.0, market_list=markets(1))
    job = JobSpec(work_hours=3.0, deadline_hours=6.0, cold_start_hours=0.2, checkpoint_gb=0)
    result = simulate(get_policy("uniform-progress", zone=grid.keys[0]), job, grid, 0, flat_egress(1))
    assert result.met_deadline
    first = result.segments[0]
    assert first.option == "spot(us-central1-a)" and first.start_hours == 0
    assert first.ended_by == "preempted" and first.end_hours == pytest.approx(1.5)
    assert result.preemptions == 1
    # After the outage it is back on spot and stays there to the end.
    assert result.segments[-1].option == "spot(us-central1-a)" and result.segments[-1].ended_by == "finished"


def test_uniform_progress_without_spot_follows_the_uniform_line_on_demand():
    grid = make_grid(np.zeros((80, 1), bool), 1.0, 5.0, market_list=markets(1))
    job = JobSpec(work_hours=3.0, deadline_hours=9.0, cold_start_hours=0.2, checkpoint_gb=0)
    result = simulate(get_policy("uniform-progress", zone=grid.keys[0]), job, grid, 0, flat_egress(1))
    assert result.met_deadline and result.spot_usd == 0
    modes = {segment_mode(s.option) for s in result.segments}
    assert modes == {"on-demand"}
    # Not on-demand from the start to the end: it leaves when ahead of the line by 2d and comes back when behind.
    assert len(result.segments) > 1
    assert result.segments[0].start_hours == pytest.approx(STEP_HOURS)  # idle at t = 0 (on the line), then behind
    for s in result.segments[:-1]:
        assert s.ended_by == "idle"


@pytest.mark.parametrize("name", ["skynomad", "eager-failover"])
def test_policies_take_cheap_spot_when_it_is_there(name):
    grid = make_grid(np.ones((60, 3), bool), [0.5, 2.0, 3.0], [10.0, 8.0, 9.0])
    job = JobSpec(work_hours=3.0, deadline_hours=6.0, cold_start_hours=0.2, checkpoint_gb=50)
    result = simulate(get_policy(name), job, grid, 6, flat_egress(3))
    assert result.met_deadline
    assert result.on_demand_usd == 0
    assert [s.option for s in result.segments] == ["spot(us-central1-a)"]
    assert result.spot_usd == pytest.approx(0.5 * 3.2)


# --------------------------------------------------------------------------- skynomad lookahead


def _home_grid() -> tuple:
    """Zone a: $2.8, always up. Zone b: $2.0, a 20-minute outage every 8 h, and down for the job's first hour."""
    ticks = 288 + 300
    available = np.ones((ticks, 2), bool)
    available[np.arange(ticks) % 48 < 2, 1] = False
    available[288:294, 1] = False
    return make_grid(available, [2.8, 2.0], [10.0, 10.0]), 288


def test_skynomad_moves_to_a_cheaper_home_when_the_rest_of_the_job_pays_for_the_move():
    grid, start = _home_grid()
    # 30 h of work left: $0.8/h cheaper pays the $5 egress many times over, though not within one 4 h stay.
    job = JobSpec(work_hours=30.0, deadline_hours=45.0, cold_start_hours=0.2, checkpoint_gb=50)
    ahead = simulate(get_policy("skynomad"), job, grid, start, flat_egress(2, 0.1))
    stays = simulate(get_policy("skynomad", home=False), job, grid, start, flat_egress(2, 0.1))
    assert ahead.met_deadline and stays.met_deadline
    assert ahead.segments[0].option == "spot(us-central1-a)"  # b is down at the start
    assert ahead.migrations == 1 and ahead.segments[-1].option == "spot(us-central1-b)"
    assert stays.migrations == 0
    assert ahead.cost_usd < stays.cost_usd


def test_skynomad_does_not_commit_to_a_home_the_rest_of_the_job_would_not_fit_in():
    grid, start = _home_grid()
    # 2 h of slack: the move's cold start and b's outages would not fit with one σ to spare.
    job = JobSpec(work_hours=30.0, deadline_hours=32.0, cold_start_hours=0.2, checkpoint_gb=50)
    result = simulate(get_policy("skynomad"), job, grid, start, flat_egress(2, 0.1))
    assert result.met_deadline
    assert result.migrations == 0


def test_skynomad_waits_out_an_outage_of_the_cheapest_market_when_it_alone_can_still_finish_the_job():
    """Zone a ($2.0) is up but for a 20-minute outage every 8 h, then down for 3 h five hours into the job.

    With 5 h of work left in 25 h, a alone will finish in time: progress is worth a's price, so
    the job waits for a rather than run on b ($2.4). Anchored at the cheapest market seen in the last
    2 h instead ("slack"), V rises to b's price once a has been gone that long, and b is taken.
    """
    ticks, start = 288 + 200, 288
    available = np.ones((ticks, 2), bool)
    available[np.arange(ticks) % 48 < 2, 0] = False
    available[start + 30 : start + 48, 0] = False
    grid = make_grid(available, [2.0, 2.4], [10.0, 10.0])
    job = JobSpec(work_hours=10.0, deadline_hours=30.0, cold_start_hours=0.2, checkpoint_gb=50)
    supply = simulate(get_policy("skynomad"), job, grid, start, flat_egress(2))
    recent = simulate(get_policy("skynomad", value="slack"), job, grid, start, flat_egress(2))
    assert supply.met_deadline and recent.met_deadline
    assert {s.option for s in supply.segments} == {"spot(us-central1-a)"}
    assert "spot(us-central1-b)" in {s.option for s in recent.segments}
    assert supply.cost_usd < recent.cost_usd


@pytest.mark.parametrize(("slack_hours", "waits"), [(1.2, True), (0.5, False)])
def test_skynomad_waits_for_the_checkpoints_market_through_a_short_outage_unless_slack_is_short(
    slack_hours, waits, monkeypatch
):
    """Zones a and b cost the same; a, where the checkpoint is, drops for 20 minutes every 8 h and just did.

    Moving to b costs $2.5 of egress; waiting for a costs time. With slack to spare the job waits
    (idle is worth a's utility over the outage and the stay after it); with little slack left the
    wait is worth less, and it moves. Idle worth 0, as before, would have moved in both cases.
    """
    ticks, now = 288, 240
    available = np.ones((ticks, 2), bool)
    available[np.arange(ticks) % 48 < 2, 0] = False
    assert not available[now, 0]
    view = MarketView(make_grid(available, [2.0, 2.0], [10.0, 10.0]), now, 1, None, flat_egress(2, 0.05))
    job = JobSpec(work_hours=30.0, deadline_hours=30.0 + slack_hours, cold_start_hours=0.2, checkpoint_gb=50)
    a, b = Option("us-central1-a", Mode.SPOT), Option("us-central1-b", Mode.SPOT)
    state = JobState(10.0, 10.0, None, 0.0, 0.0, a.market, a.market)

    decision = get_policy("skynomad").decide(job, state, view, 10.0)
    assert decision.try_in_order[-1] is IDLE
    assert (b not in decision.try_in_order) is waits

    monkeypatch.setattr(SkyNomadPolicy, "_waiting", lambda *args: 0.0)
    assert b in get_policy("skynomad").decide(job, state, view, 10.0).try_in_order

"""The simulator on random small traces: no feasible deadline missed, books that add up, baselines exact."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from skynomad_synth import flat_egress, grids, jobs, make_grid, markets, segment_market, segment_mode

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.simulator import _Ledger, simulate, window_ticks

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXTRA_TICKS = 12  # history before the window (and room to start later)


class Scripted:
    """A hand-written policy: `choose(job, state, view, now)` decides; every question asked is kept."""

    name = "scripted"

    def __init__(self, choose):
        self.choose = choose
        self.asked = []  # (now, job, state) of every decide call

    def decide(self, job, state, view, now):
        self.asked.append((now, job, state))
        return self.choose(job, state, view, now)


def policies_for(grid):
    """Every simulated policy, uniform progress once per zone."""
    out = [
        ("skynomad", get_policy("skynomad")),
        ("eager-failover", get_policy("eager-failover")),
        ("on-demand", get_policy("on-demand")),
    ]
    out += [(f"uniform-progress[{k}]", get_policy("uniform-progress", zone=k)) for k in grid.keys]
    return out


@st.composite
def cases(draw, gang=(1, 1), whole_steps=False, reaction=False):
    instances = draw(st.integers(*gang))
    job = draw(jobs(feasible=True, instances=instances, whole_steps=whole_steps))
    bandwidth = draw(st.sampled_from([None, None, 200.0, 1000.0]))  # GB/h: a move also costs S/bandwidth hours
    if bandwidth is not None:
        job = JobSpec(
            job.work_hours,
            job.deadline_hours,
            job.cold_start_hours,
            max(job.checkpoint_gb, 10.0),
            job.instances,
            bandwidth_gb_per_hour=bandwidth,
        )
    if reaction:  # Airflow's event → worker lag, 1 minute to 3 steps
        job = replace(job, reaction_hours=draw(st.integers(1, 30)) / 60.0)
    ticks = window_ticks(job, 1 / 6) + EXTRA_TICKS
    grid = draw(grids(ticks=ticks, max_gang=instances))
    start = draw(st.integers(0, EXTRA_TICKS))
    egress = EgressModel().matrix(grid.markets) if draw(st.booleans()) else flat_egress(len(grid.markets), 0.02)
    return job, grid, start, egress


def check_books(result, job, egress, grid) -> None:
    """Totals equal the billed segments; egress equals the moves between consecutive launches."""
    segments = result.segments
    assert result.cost_usd == pytest.approx(
        sum(s.usd for s in segments) + result.egress_usd + result.probe_usd, abs=1e-9
    )
    spot = [s for s in segments if segment_mode(s.option) == "spot"]
    on_demand = [s for s in segments if segment_mode(s.option) == "on-demand"]
    assert len(spot) + len(on_demand) == len(segments)
    assert result.spot_usd == pytest.approx(sum(s.usd for s in spot), abs=1e-9)
    assert result.on_demand_usd == pytest.approx(sum(s.usd for s in on_demand), abs=1e-9)
    assert result.spot_hours == pytest.approx(sum(s.end_hours - s.start_hours for s in spot), abs=1e-9)
    assert result.on_demand_hours == pytest.approx(sum(s.end_hours - s.start_hours for s in on_demand), abs=1e-9)
    # Each segment is billed at its market's price for its hours (prices vary per step, so bound it).
    for s in segments:
        j = grid.index(segment_market(s.option))
        prices = grid.spot_usd_per_hour if segment_mode(s.option) == "spot" else grid.on_demand_usd_per_hour
        hours = s.end_hours - s.start_hours
        assert hours > 0
        lo, hi = prices[:, j].min() * job.instances * hours, prices[:, j].max() * job.instances * hours
        assert lo - 1e-9 <= s.usd <= hi + 1e-9
    # Segments are in time order, never overlap, and stay within the window's steps.
    for a, b in itertools.pairwise(segments):
        assert a.end_hours <= b.start_hours + 1e-9
    # One segment per launch; once a checkpoint exists (the first group that got past its cold start
    # wrote it), every launch moves it and pays S·egress(where it was → new market).
    assert result.launches == len(segments)
    checkpoint, moved = None, []
    for s in segments:
        market = segment_market(s.option)
        if checkpoint is not None:
            moved.append((checkpoint, market))
            checkpoint = market
        elif s.end_hours - s.start_hours > job.cold_start_hours + 1e-9:
            checkpoint = market
    expected_egress = sum(job.checkpoint_gb * egress[grid.index(x), grid.index(y)] for x, y in moved)
    assert result.egress_usd == pytest.approx(expected_egress, abs=1e-9)
    assert result.migrations == sum(x != y for x, y in moved)
    assert result.preemptions == sum(s.ended_by == "preempted" for s in segments)
    assert result.probe_usd >= 0
    billed = result.spot_hours + result.on_demand_hours
    if result.finish_hours is not None:
        assert result.unfinished_work_hours <= 1e-9
        assert segments[-1].end_hours == pytest.approx(result.finish_hours)
        assert segments[-1].ended_by == "finished"
        # Billed time = work + the warm-ups paid (each at most one cold start plus one checkpoint transfer).
        warmup = job.cold_start_hours + job.transfer_hours(True)
        assert job.work_hours - 1e-9 <= billed <= job.work_hours + result.launches * warmup + 1e-9


def check_runs(case, skip=()) -> None:
    job, grid, start, egress = case
    assert job.deadline_hours >= job.work_hours + job.cold_start_hours
    for name, policy in policies_for(grid):
        if name in skip:
            continue
        result = simulate(policy, job, grid, start, egress)
        assert result.met_deadline, (name, job, result.to_dict())
        assert result.finish_hours <= job.deadline_hours + 1e-6
        check_books(result, job, egress, grid)
        if not name.startswith("skynomad"):
            assert result.probe_usd == 0  # only skynomad probes


@SETTINGS
@given(cases())
def test_no_policy_misses_a_feasible_deadline_and_the_books_add_up(case):
    check_runs(case)


@SETTINGS
@given(cases(whole_steps=True))
def test_no_policy_misses_a_feasible_deadline_on_a_step_boundary(case):
    check_runs(case)


# Found by hypothesis: the net, deciding while a spot group was still in its cold start (no checkpoint
# yet), picked the cheapest on-demand zone elsewhere; a lag later the group had written its first
# checkpoint, so the fallback had to move 50 GB (0.25 h at 200 GB/h) and finished 0.05 h late.
MISSED_WHEN_THE_CHECKPOINT_APPEARS_IN_THE_LAG = (
    JobSpec(
        work_hours=1.14,
        deadline_hours=2.01,
        cold_start_hours=0.17,
        checkpoint_gb=50.0,
        instances=1,
        probe_hours=1 / 60,
        bandwidth_gb_per_hour=200.0,
        reaction_hours=1 / 60,
    ),
    make_grid(
        available=np.array(
            [  # free spot instances per step, one row per market (us-central1-a, us-central1-b, europe-west1-c)
                [2, 1, 1, 2, 3, 1, 2, 1, 2, 3, 3, 1, 2, 1, 3, 2, 1, 3, 1, 2, 3, 3, 2, 3, 3],
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                [0, 0, 0, 1, 3, 0, 0, 0, 0, 0, 1, 2, 2, 0, 0, 0, 2, 2, 1, 2, 0, 1, 3, 3, 2],
            ]
        ).T,
        spot=[2.9150876, 2.74761708, 1.8543185],
        on_demand=[7.99702996, 3.47809591, 7.30248496],
    ),
    1,
    flat_egress(3, 0.02),
)


# 300 examples: 40 did not find the misses a one-lag safety margin allowed.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(reaction=True))
@example(case=MISSED_WHEN_THE_CHECKPOINT_APPEARS_IN_THE_LAG)
def test_no_policy_misses_a_feasible_deadline_when_every_change_is_carried_out_late(case):
    check_runs(case)


def test_a_change_is_carried_out_a_reaction_lag_later_and_a_preemption_answered_as_late():
    def choose(job, state, view, now):
        if now < 0.9:
            return Decision((Option(view.keys[0], Mode.SPOT),))
        return Decision((Option(view.keys[1], Mode.ON_DEMAND),))

    available = np.ones((40, 2), bool)
    available[3:5, 0] = False  # a loses capacity at tick 3 (0.5 h), back at tick 5
    grid = make_grid(available, [1.0, 2.0], [6.0, 5.0])
    job = JobSpec(work_hours=2.0, deadline_hours=4.0, cold_start_hours=0.2, checkpoint_gb=0, reaction_hours=0.25)
    policy = Scripted(choose)
    result = simulate(policy, job, grid, 0, flat_egress(2))
    segments = [(s.option, round(s.start_hours, 3), round(s.end_hours, 3), s.ended_by) for s in result.segments]
    # The lag (0.25 h) rounds up to two 10-minute steps; the first launch is the worker's own, at once.
    # Preempted at 0.5 h, the worker decides at 0.833 h (spot a again); at 1.0 h the planner wants
    # on-demand b, which the worker launches at 1.333 h.
    assert segments == [
        ("spot(us-central1-a)", 0.0, 0.5, "preempted"),
        ("spot(us-central1-a)", 0.833, 1.333, "moved"),
        ("on-demand(us-central1-b)", 1.333, segments[-1][2], "finished"),
    ]
    asked = [round(now, 3) for now, _, _ in policy.asked]
    # It plans with the lag it gets.
    assert all(planned.reaction_hours == pytest.approx(2 / 6) for _, planned, _ in policy.asked)
    assert 0.5 not in asked and 0.667 not in asked
    assert result.met_deadline


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(gang=(2, 4), whole_steps=True))
def test_gangs_meet_feasible_deadlines_and_pay_per_instance(case):
    check_runs(case)


def test_skynomad_meets_a_deadline_inside_the_last_step():
    """Regression (ba04751): is_safe called 'finishes within this step' safe even past a deadline inside the step."""
    grid = make_grid(np.ones((20, 2), bool), [1.0, 1.5], [4.0, 5.0])
    job = JobSpec(work_hours=2.27, deadline_hours=2.38, cold_start_hours=0.1, checkpoint_gb=0.0)
    result = simulate(get_policy("skynomad"), job, grid, 0, flat_egress(2))
    # At ba04751: on-demand until 2.33 h, then spot(us-central1-a) with a 0.1 h cold start, finishing at 2.47 h.
    assert result.met_deadline, [(s.option, s.start_hours, s.end_hours) for s in result.segments]


@settings(max_examples=40, deadline=None)
@given(jobs(feasible=True, instances=1), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_on_demand_baseline_costs_the_cheapest_on_demand_price_times_work_plus_one_cold_start(job, n, gang, seed):
    rng = np.random.default_rng(seed)
    ticks = window_ticks(job, 1 / 6) + 4
    on_demand = rng.uniform(2, 12, n)
    grid = make_grid(rng.integers(0, 4, (ticks, n)), on_demand * 0.3, on_demand)
    job = JobSpec(job.work_hours, job.deadline_hours, job.cold_start_hours, job.checkpoint_gb, instances=gang)
    result = simulate(get_policy("on-demand"), job, grid, 2, flat_egress(n))
    assert result.met_deadline
    assert result.cost_usd == pytest.approx(on_demand.min() * gang * (job.work_hours + job.cold_start_hours))
    assert result.finish_hours == pytest.approx(job.work_hours + job.cold_start_hours)
    assert result.launches == 1 and result.migrations == 0 and result.egress_usd == 0


def test_infeasible_job_is_a_recorded_miss_not_an_exception():
    grid = make_grid(np.ones((30, 2), bool), [1.0, 2.0], [5.0, 6.0])
    job = JobSpec(work_hours=2.0, deadline_hours=2.1, cold_start_hours=0.2)  # T < P + d
    for _, policy in policies_for(grid):
        result = simulate(policy, job, grid, 0, flat_egress(2))
        assert not result.met_deadline
        data = result.to_dict()
        assert data["met_deadline"] is False and data["cost_usd"] >= 0


def test_preemption_checkpoint_and_cold_starts_are_accounted():
    """Hand-traced run: spot in a until it is lost at 1 h, then on-demand in b to the end."""

    def choose(job, state, view, now):
        if state.running is None and now < 0.5:
            return Decision((Option(view.keys[0], Mode.SPOT),))
        if state.running is None:
            return Decision((Option(view.keys[1], Mode.ON_DEMAND),))
        return Decision((state.running,))

    available = np.ones((40, 2), bool)
    available[6:, 0] = False  # a loses capacity at tick 6 (1 h)
    grid = make_grid(available, [1.0, 2.0], [6.0, 5.0])
    job = JobSpec(work_hours=2.0, deadline_hours=4.0, cold_start_hours=0.2, checkpoint_gb=10)
    egress = flat_egress(2, 0.05)
    result = simulate(Scripted(choose), job, grid, 0, egress)
    # spot a: 1 h billed, 0.8 h progress; on-demand b: 0.2 h cold start + 1.2 h work.
    assert [(s.option, s.ended_by) for s in result.segments] == [
        ("spot(us-central1-a)", "preempted"),
        ("on-demand(us-central1-b)", "finished"),
    ]
    assert result.spot_usd == pytest.approx(1.0)
    assert result.on_demand_usd == pytest.approx(5.0 * 1.4)
    assert result.egress_usd == pytest.approx(10 * 0.05)
    assert result.finish_hours == pytest.approx(2.4)
    assert result.preemptions == 1 and result.migrations == 1 and result.launches == 2
    assert result.cost_usd == pytest.approx(1.0 + 7.0 + 0.5)


def test_probes_are_billed_only_where_capacity_answered():
    def probe_everything(job, state, view, now):
        return Decision((Option(view.keys[1], Mode.ON_DEMAND),), probes=tuple(view.keys))

    available = np.zeros((30, 2), bool)
    available[:, 0] = True
    grid = make_grid(available, [3.0, 1.0], [5.0, 6.0])
    job = JobSpec(work_hours=1.0, deadline_hours=2.0, cold_start_hours=0.2, probe_hours=0.01)
    result = simulate(Scripted(probe_everything), job, grid, 0, flat_egress(2))
    steps = 8  # 1.2 h at 10-minute steps, the last step finishes the job
    assert result.probe_usd == pytest.approx(steps * 0.01 * 3.0)
    assert result.cost_usd == pytest.approx(6.0 * 1.2 + steps * 0.01 * 3.0)


def test_window_must_fit_the_trace():
    grid = make_grid(np.ones((10, 1), bool), 1.0, 5.0, market_list=markets(1))
    job = JobSpec(work_hours=1.0, deadline_hours=1.5, cold_start_hours=0.2)
    assert window_ticks(job, 1 / 6) == 9
    simulate(get_policy("on-demand"), job, grid, 1, flat_egress(1))
    with pytest.raises(ValueError, match="does not fit"):
        simulate(get_policy("on-demand"), job, grid, 2, flat_egress(1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_runs_on_traces_differing_only_after_tick_k_agree_up_to_k(case, data):
    """The simulator and every policy only use the past.

    Rewrite the trace after tick k: the run up to k is unchanged.
    """
    job, grid, start, egress = case
    ticks = window_ticks(job, grid.step_hours)
    k = data.draw(st.integers(0, ticks - 1))
    g = start + k
    rng = np.random.default_rng(k)
    other = make_grid(
        np.concatenate([grid.available[: g + 1], rng.integers(0, 3, grid.available[g + 1 :].shape)]),
        np.concatenate([grid.spot_usd_per_hour[: g + 1], rng.uniform(0.1, 9, grid.spot_usd_per_hour[g + 1 :].shape)]),
        np.concatenate(
            [grid.on_demand_usd_per_hour[: g + 1], rng.uniform(2, 12, grid.on_demand_usd_per_hour[g + 1 :].shape)]
        ),
    )
    cutoff = (k + 1) * grid.step_hours  # everything billed before the end of step k
    for name, _ in policies_for(grid):
        params = {"zone": name[len("uniform-progress[") : -1]} if name.startswith("uniform-progress[") else {}
        base = name.split("[")[0]
        a = simulate(get_policy(base, **params), job, grid, start, egress)
        b = simulate(get_policy(base, **params), job, other, start, egress)
        early_a = [(s.option, s.start_hours) for s in a.segments if s.start_hours < cutoff - 1e-9]
        early_b = [(s.option, s.start_hours) for s in b.segments if s.start_hours < cutoff - 1e-9]
        assert early_a == early_b, name


def test_a_group_lost_in_its_first_cold_start_leaves_no_checkpoint_to_move():
    def choose(job, state, view, now):
        return Decision((Option(view.keys[0] if now < 0.1 else view.keys[2], Mode.SPOT),))

    available = np.ones((40, 3), bool)
    available[1:, 0] = False  # a drops the job 10 minutes in, before its 12-minute cold start ends
    grid = make_grid(available, [1.0, 2.0, 2.0], [6.0, 6.0, 6.0])
    job = JobSpec(work_hours=1.0, deadline_hours=4.0, cold_start_hours=0.2, checkpoint_gb=50)
    policy = Scripted(choose)
    result = simulate(policy, job, grid, 0, flat_egress(3, 0.1))
    assert [s.ended_by for s in result.segments] == ["preempted", "finished"]
    assert result.egress_usd == 0 and result.migrations == 0  # nothing was written in a, nothing moved
    checkpoints = [state.checkpoint_market for _, _, state in policy.asked]
    assert checkpoints[:3] == [None, None, None]  # the second group is still warming up at 0.33 h
    assert checkpoints[-1] == "europe-west1-c"  # its first progress wrote the checkpoint there


def views_of_a_job_on_demand_in_a(available: np.ndarray, **information) -> list:
    """Every view a job running on-demand in market a (of a, b) is shown, window from tick 4, 10-minute steps."""
    views = []

    def on_demand_in_a(job, state, view, now):
        views.append(view)
        return Decision((Option(view.keys[0], Mode.ON_DEMAND),))

    grid = make_grid(available, [1.0, 1.0], [5.0, 6.0])
    job = JobSpec(work_hours=2.0, deadline_hours=3.0, cold_start_hours=0.2)
    simulate(Scripted(on_demand_in_a), job, grid, 4, flat_egress(2), **information)
    return views


def test_observe_all_shows_every_market_up_to_now_and_never_after():
    """The diagnostic sees what the job did not observe, but still nothing after the current step."""
    available = np.zeros((30, 2), bool)
    available[::2, 1] = True  # b flaps every step; the job never looks at it
    last = views_of_a_job_on_demand_in_a(available)[-1]
    age, _ = last.last_seen
    assert age[1] == last.tick - 3  # without it b was last seen in the table's history, before the window
    for view in views_of_a_job_on_demand_in_a(available, observe_all=True):
        usable, seen = view.usable_history()
        assert seen.all() and usable.shape[0] == view.tick + 1  # everything so far, nothing after
        assert list(usable[:, 1]) == list(available[: view.tick + 1, 1])


def test_the_ledger_refuses_a_change_of_option_that_was_not_closed_with_its_cause():
    a, b = Option("z-a", Mode.SPOT), Option("z-b", Mode.SPOT)
    ledger = _Ledger()
    ledger.bill(a, 0.0, 0.5, 1.0)
    ledger.bill(a, 0.5, 0.5, 1.0)  # the same run goes on
    with pytest.raises(RuntimeError, match="not closed"):
        ledger.bill(b, 1.0, 0.5, 1.0)
    ledger.close("moved")
    ledger.bill(b, 1.0, 0.5, 1.0)
    ledger.close("finished")
    assert ledger.result.spot_usd == pytest.approx(3.0)  # the refused bill was not counted
    assert [(s.option, s.start_hours, s.end_hours, s.ended_by) for s in ledger.result.segments] == [
        (str(a), 0.0, 1.0, "moved"),
        (str(b), 1.0, 1.5, "finished"),
    ]


def test_the_market_table_shows_the_probe_dags_latest_round_and_the_jobs_own_observations_exactly():
    available = np.zeros((30, 2), bool)
    available[1::2, 0] = True  # a (where the job runs on-demand, so it sees a) is up on odd ticks
    available[::2, 1] = True  # b is up on even ticks only; the job never looks at it
    for view in views_of_a_job_on_demand_in_a(available, table_probe_hours=0.5):  # a round every 3rd tick
        usable, seen = view.usable_history()
        assert seen.all() and usable.shape[0] == view.tick + 1
        rounds = [4 + (g - 4) // 3 * 3 if g >= 4 else g for g in range(view.tick + 1)]
        assert list(usable[:, 1]) == [bool(available[r, 1]) for r in rounds]  # held between rounds, never ahead
        assert list(usable[4:, 0]) == list(available[4 : view.tick + 1, 0])  # what the job saw itself is exact


def test_one_information_model_at_a_time():
    grid = make_grid(np.ones((20, 1), bool), 1.0, 5.0, market_list=markets(1))
    job = JobSpec(work_hours=1.0, deadline_hours=2.0, cold_start_hours=0.2)
    with pytest.raises(ValueError, match="pick one"):
        simulate(get_policy("on-demand"), job, grid, 0, flat_egress(1), observe_all=True, table_probe_hours=1.0)
    for bad in (0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="must be a number > 0"):
            simulate(get_policy("on-demand"), job, grid, 0, flat_egress(1), table_probe_hours=bad)

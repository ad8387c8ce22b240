"""Policy switching: while restarts are scarce, follow skynomad or eager-failover, as sampled futures favour."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.policies.switching import SwitchingPolicy
from airflow_provider_skynomad.planner.policies.uniform_progress import EagerFailoverPolicy
from airflow_provider_skynomad.simulation.simulator import simulate

A1, A2, B1 = "us-central1-a", "us-central1-b", "europe-west1-c"


def squeezed_region(ticks: int = 400):
    """us-central1-a is up 5 h of every 6; one step after it drops, its neighbour us-central1-b drops too.

    europe-west1-c is dearer and always up; asia-south2-b never is.
    """
    phase = np.arange(ticks) % 36
    up = np.ones((ticks, 4), bool)
    up[:, 0] = phase < 30
    up[:, 1] = ~(phase >= 31)
    up[:, 3] = False
    return make_grid(up, [1.0, 1.1, 1.3, 1.5], 6.0)


def just_preempted(slack_hours: float):
    """us-central1-a has just lost capacity under the job, 20.4 h of work are left."""
    grid = squeezed_region()
    view = MarketView(grid, 36 * 8 + 30, 1, np.ones(grid.available.shape, bool), flat_egress(4))
    job = JobSpec(work_hours=30.0, deadline_hours=30.4 + slack_hours, cold_start_hours=0.2, checkpoint_gb=10)
    state = JobState(elapsed_hours=10.0, progress_hours=9.6, checkpoint_market=A1, last_preempted_market=A1)
    return job, state, view


def test_with_one_restart_left_it_leaves_the_squeezed_region_as_failover_does():
    job, state, view = just_preempted(slack_hours=0.5)
    # skynomad alone would relaunch next door, in the region being squeezed; failover goes elsewhere
    assert SkyNomadPolicy().decide(job, state, view, 10.0).try_in_order[1].market == A2
    assert EagerFailoverPolicy().decide(job, state, view, 10.0).first.market == B1
    policy = SwitchingPolicy()
    decision = policy.decide(job, state, view, 10.0)
    assert policy.comparisons == 1
    assert decision.first.market == B1
    assert "eager-failover" in decision.reason


def test_with_slack_for_a_lost_restart_it_keeps_skynomads_choice():
    # Losing the launch next door now costs only a cold start, and us-central1-a is worth coming back to.
    job, state, view = just_preempted(slack_hours=0.7)
    policy = SwitchingPolicy()
    assert policy.decide(job, state, view, 10.0) == SkyNomadPolicy().decide(job, state, view, 10.0)
    assert policy.comparisons == 1


def test_with_slack_for_many_restarts_it_is_skynomad_and_compares_nothing():
    job, state, view = just_preempted(slack_hours=6.0)
    policy = SwitchingPolicy()
    assert policy.decide(job, state, view, 10.0) == SkyNomadPolicy().decide(job, state, view, 10.0)
    assert policy.comparisons == 0


def test_a_verdict_is_kept_while_nothing_changes_and_the_same_inputs_give_the_same_decision():
    job, state, view = just_preempted(slack_hours=0.5)
    policy = SwitchingPolicy()
    first = policy.decide(job, state, view, 10.0)
    assert policy.decide(job, state, view, 10.0) == first and policy.comparisons == 1
    assert SwitchingPolicy().decide(job, state, view, 10.0) == first


@pytest.mark.parametrize("slack_hours", [0.3, 0.5, 1.0, 3.0])
def test_it_never_misses_a_feasible_deadline(slack_hours):
    grid = squeezed_region()
    job = JobSpec(work_hours=20.0, deadline_hours=20.0 + slack_hours, cold_start_hours=0.2, checkpoint_gb=10)
    result = simulate(SwitchingPolicy(futures=4), job, grid, 200, flat_egress(4))
    assert result.met_deadline

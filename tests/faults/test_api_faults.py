"""Cloud API throttling, timeouts and insufficient capacity, injected under the runtime's retries
(clouds/faults.py below clouds/retry.py), in whole `dag.test()` runs; the invariants after each."""

from __future__ import annotations

from airflow_provider_skynomad.clouds.faults import FaultPlan

from .conftest import attach_cloud, market_table, run_job, synthetic_trace
from .invariants import check_all


def check(sim_env, outcome):
    table = market_table()
    try:
        check_all(attach_cloud(sim_env.home), [outcome], table, written=sim_env.written, started=1)
    finally:
        table.close()


def test_throttled_and_timed_out_calls_are_retried_and_a_lost_launch_reply_launches_once(sim, capfd):
    plan = FaultPlan()
    plan.add("launch", "throttle", times=2)  # the first launch is refused twice, then taken
    plan.add("launch", "lost_reply", skip=0, times=1)  # ... taken, but its answer is lost
    plan.add("poll", "throttle", skip=1, times=3)  # the trigger's polls are throttled for a while
    plan.add("progress", "timeout", times=2)
    env = sim(synthetic_trace(), plan=plan)
    outcome, state = run_job()
    out = capfd.readouterr().out
    print(out[-12000:])
    assert state == "success", outcome
    assert plan.injected("launch", "throttle") == 2 and plan.injected("launch", "lost_reply") == 1
    assert plan.injected("poll") == 3 and plan.injected("progress") == 2
    cloud = attach_cloud(env.home)
    launches = cloud.launches(outcome["job_id"])
    assert len(launches) == 1, launches  # the retried launch found its own group by its client token
    assert outcome["deadline_met"] is True
    check(env, outcome)

"""Cloud API throttling, timeouts and insufficient capacity, injected under the runtime's retries
(clouds/faults.py below clouds/retry.py), in whole `dag.test()` runs; the invariants after each."""

from __future__ import annotations

from airflow_provider_skynomad.clouds.faults import FaultPlan

from .conftest import attach_cloud, check_run, run_job, synthetic_trace


def test_throttled_and_timed_out_calls_are_retried_and_a_lost_launch_reply_launches_once(sim, capfd):
    plan = FaultPlan()
    plan.add("launch", "throttle", times=2)  # the first launch is refused twice, then taken
    plan.add("launch", "lost_reply", skip=0, times=1)  # ... taken, but its answer is lost
    plan.add("poll", "throttle", skip=1, times=3)  # the trigger's polls are throttled for a while
    plan.add("progress", "timeout", times=2)
    # The throttled polls and timed-out progress reads need the trigger to look twice before the
    # workload ends (a first look that finds it done reads nothing more). At 300x the 0.85 h it
    # runs are 10 s of wall time, against the seconds a loaded box takes to open the job's
    # controller (the trigger's first look); at 600x, with 0.5 h of work, that was 3.6 s.
    env = sim(synthetic_trace(), plan=plan, speed=300.0)
    outcome, state = run_job(work_hours=0.75)
    assert state == "success", (outcome, capfd.readouterr().out[-3000:])
    assert plan.injected("launch", "throttle") == 2 and plan.injected("launch", "lost_reply") == 1
    assert plan.injected("poll") == 3 and plan.injected("progress") == 2
    cloud = attach_cloud(env.home)
    launches = cloud.launches(outcome["job_id"])
    assert len(launches) == 1, launches  # the retried launch found its own group by its client token
    assert outcome["deadline_met"] is True
    check_run(env, outcome)


def test_a_throttled_launch_that_outlasts_the_retries_fails_the_job_in_plain_words(sim, capfd):
    plan = FaultPlan()
    plan.add("launch", "throttle", times=None)  # the API never takes a launch
    env = sim(synthetic_trace(), plan=plan)
    outcome, state = run_job(capfd=capfd)
    assert state == "failed"
    assert "the cloud API did not answer" in outcome["error"], outcome
    assert "nothing of this job is running" in outcome["error"]
    assert plan.injected("launch") >= 3 * 4  # every zone tried, each with its retries
    assert attach_cloud(env.home).launches(outcome["job_id"]) == []
    check_run(env, outcome)


def test_a_poll_throttled_for_good_fails_the_job_after_a_few_steps_and_stops_its_group(sim, capfd):
    plan = FaultPlan()
    plan.add("poll", "throttle", skip=2, times=None)
    # Two looks must come before the workload ends, or one finds it done: at 300x (as above).
    env = sim(synthetic_trace(), plan=plan, speed=300.0)
    outcome, state = run_job(capfd=capfd)
    assert state == "failed"
    assert "decision steps in a row" in outcome["error"], outcome
    (launch,) = attach_cloud(env.home).launches(outcome["job_id"])
    assert launch["end_hours"] is not None  # stopped when the job failed
    check_run(env, outcome)


def test_no_capacity_in_the_cheapest_zone_sends_the_job_elsewhere_and_a_failed_move_back_keeps_it_there(sim, capfd):
    plan = FaultPlan()
    plan.add("launch", "capacity", zones={"us-central1-a"}, times=None)  # the API refuses what the probes saw
    env = sim(synthetic_trace(), plan=plan)
    outcome, state = run_job(capfd=capfd)
    assert state == "success", (outcome, capfd.readouterr().out[-3000:])
    assert plan.injected("launch", "capacity") >= 1
    launches = attach_cloud(env.home).launches(outcome["job_id"])
    assert [g["zone"] for g in launches] == ["us-central1-b"]  # one group, kept while moves back failed
    check_run(env, outcome)


def test_no_on_demand_capacity_in_one_zone_falls_back_to_on_demand_in_another(sim, capfd):
    plan = FaultPlan()
    plan.add("launch", "capacity", zones={"us-central1-a"}, spot=False, times=None)
    env = sim(synthetic_trace(), plan=plan)
    outcome, state = run_job("on_demand_dag", work_hours=0.5, capfd=capfd)  # the first launch is the point
    assert state == "success", (outcome, capfd.readouterr().out[-3000:])
    assert plan.injected("launch", "capacity") == 1
    (launch,) = attach_cloud(env.home).launches(outcome["job_id"])
    assert not launch["spot"] and launch["zone"] == "us-central1-b"  # the next cheapest on-demand
    check_run(env, outcome)

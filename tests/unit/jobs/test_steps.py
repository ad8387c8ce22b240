"""The controller's steps: a look about a state the job has left is dropped, and a preemption is
acted on the step it is seen (relaunch, the market told, the record written before the launch)."""

from __future__ import annotations

from airflow_provider_skynomad.jobs.events import EventKind, JobEvent


def test_a_look_about_a_state_the_job_has_left_changes_nothing(started, cloud):
    job = started()
    steps = job.controller().steps
    record = steps.record
    before = (len(cloud.launches), record.seq, len(record.timeline))
    assert steps.handle(record, JobEvent(kind=EventKind.PREEMPTED, seq=record.seq - 1)) is False
    assert (len(cloud.launches), record.seq, len(record.timeline)) == before and cloud.terminated == []


def test_the_policy_is_built_once_per_job_and_shared_by_the_watch_and_the_steps(started):
    job = started()
    controller = job.controller()
    run = controller.steps.run
    policy = run.policy
    controller.step()
    assert run.policy is policy

"""The controller loop against a fake cloud: it acts the step it sees something, ends once, and a
second copy of it (a triggerer failover) takes over while the first can no longer act."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.clouds.base import GroupStatus
from airflow_provider_skynomad.jobs.contract import OutcomeKind
from airflow_provider_skynomad.jobs.errors import ControlLost


def test_a_quiet_job_is_left_alone_and_its_end_reported_once(started, cloud):
    job = started()
    controller = job.controller()
    cloud.progress_fraction, cloud.hours = 0.2, 1.5
    assert controller.step().outcome is None and len(cloud.launches) == 1
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.SUCCEEDED
    cloud.hours = 6.5
    outcome = controller.step().outcome
    assert outcome.kind is OutcomeKind.FINISHED and outcome.job_id == job.args.job_id
    record = job.record()
    assert record.finished and record.summary["deadline_met"] and first.client_token in cloud.terminated


def test_a_preemption_is_relaunched_the_step_it_is_seen(started, cloud):
    job = started(policy="eager-failover")
    controller = job.controller()
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.full.add(first.zone)
    cloud.progress_fraction, cloud.hours = 0.2, 1.0
    assert controller.step().outcome is None
    relaunch = cloud.launches[-1]
    record = job.record()
    assert relaunch.zone != first.zone and record.group.client_token == relaunch.client_token
    assert record.preemptions == 1 and record.segments[-1].start_hours == pytest.approx(1.0)
    # One copy, to the zone that took the relaunch (the full zone tried first cost none).
    assert cloud.copies == [(first.zone, relaunch.zone, 50.0)]
    events = [n["event"] for n in record.timeline]
    assert events.index("preempted") < events.index("migrate")


def test_a_failed_group_ends_the_job_with_the_workloads_last_lines(started, cloud):
    job = started()
    controller = job.controller()
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.FAILED
    cloud.failure_detail = lambda handle: "ValueError: bad learning rate"
    outcome = controller.step().outcome
    assert outcome.kind is OutcomeKind.FAILED and "bad learning rate" in outcome.message


def test_a_second_copy_takes_over_and_the_first_stops_before_it_acts(started, cloud):
    job = started(policy="eager-failover")
    stale, fresh = job.controller(), job.controller()  # the second copy started last: it controls the job
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.progress_fraction, cloud.hours = 0.2, 1.0
    with pytest.raises(ControlLost):
        stale.step()
    assert len(cloud.launches) == 1  # the stale copy launched nothing
    fresh.step()
    assert len(cloud.launches) == 2 and job.record().preemptions == 1


def test_a_late_step_is_planned_with(started, cloud):
    job = started()
    controller = job.controller()
    cloud.progress_fraction, cloud.hours = 0.1, 1.0
    controller.step(late_hours=0.2, late_seconds=2.4)
    record = job.record()
    assert record.job.reaction_hours == pytest.approx(0.2)
    (item,) = [n for n in record.timeline if n["event"] == "reaction lag"]
    assert item["wall_seconds"] == 2.4


def test_a_database_that_does_not_answer_leaves_the_job_then_fails_it(started, cloud, monkeypatch):
    from sqlalchemy.exc import OperationalError

    from airflow_provider_skynomad.jobs.controller import MAX_DB_STEPS

    job = started(policy="eager-failover")
    controller = job.controller()
    first = cloud.launches[0]
    cloud.status[first.client_token] = GroupStatus.PREEMPTED
    cloud.progress_fraction, cloud.hours = 0.2, 1.0

    def down(*args, **kwargs):
        raise OperationalError("UPDATE job_records", {}, Exception("server closed the connection"))

    monkeypatch.setattr(controller.store.table, "claim", down)
    monkeypatch.setattr(controller.store.table, "load", down)
    for _ in range(MAX_DB_STEPS - 1):
        look = controller.step()
        assert look.outcome is None and "did not answer" in look.words
    assert len(cloud.launches) == 1  # nothing acted on while the record could not be written
    look = controller.step()
    assert look.outcome.kind is OutcomeKind.FAILED and "server closed the connection" in look.outcome.message


def test_break_1_a_controller_whose_arguments_name_another_task_s_job_takes_nothing(started, cloud):
    """The trigger's arguments name the job and the task it was deferred from: a job id of another
    task is refused before the row is claimed, so that task's controller keeps control."""
    from dataclasses import replace

    from airflow_provider_skynomad.jobs.errors import SkyNomadInputError

    victim, attacker = started(run=1), started(run=2)
    before = victim.jobs.load(victim.args.job_id)
    args = replace(attacker.args, job_id=victim.args.job_id)
    from airflow_provider_skynomad.jobs.controller import Controller

    with pytest.raises(SkyNomadInputError, match="the trigger's arguments names SkyNomad job"):
        Controller.open(args, attacker.config, cloud, attacker.table, attacker.log)
    after = victim.jobs.load(victim.args.job_id)
    assert (after.version, after.owner) == (before.version, before.owner)
    assert len(cloud.launches) == 2 and cloud.terminated == []

"""The worker's side of a job: a retry reconnects to what the job has, a clear is told from a retry,
the controller's outcome becomes the task's result, and on_kill ends what the job launched."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.jobs.contract import Outcome, OutcomeKind
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.worker import Defer, Finish


def test_a_retry_reconnects_to_the_running_group_without_a_launch(started, cloud):
    job = started()
    worker = job.worker(try_number=2)
    answer = worker.resume(job.record())
    assert isinstance(answer, Defer) and answer.args.job_id == job.args.job_id
    assert len(cloud.launches) == 1 and job.record().seq == 2  # handed over again
    assert ControllerArgsRoundTrip(answer)


def ControllerArgsRoundTrip(answer: Defer) -> bool:  # noqa: N802 - reads as the assertion it makes
    from airflow_provider_skynomad.jobs.contract import ControllerArgs

    return ControllerArgs.from_kwargs(answer.trigger_kwargs) == answer.args


def test_a_clear_is_told_from_a_retry_by_max_tries(started):
    job = started()
    record = job.record()
    assert not job.worker(try_number=2, max_tries=2).cleared_since(record)
    assert job.worker(try_number=1, max_tries=4).cleared_since(record)


def test_the_outcome_becomes_the_tasks_result(started):
    job = started()
    record = job.record()
    worker = job.worker()
    with pytest.raises(SkyNomadJobFailed, match="the group failed"):
        worker.report(record, Outcome(OutcomeKind.FAILED, record.job_id, "the group failed"))
    assert [n["reason"] for n in record.timeline if n["event"] == "failed"] == ["the group failed"]
    record.finished, record.summary = True, {"cost_usd": {"total": 1.0}}
    assert worker.report(record, Outcome(OutcomeKind.FINISHED, record.job_id)) == Finish(record.summary)


def test_on_kill_ends_the_group_and_another_tasks_job_is_refused(started, cloud):
    job = started()
    record = job.record()
    worker = job.worker()
    worker.on_kill(record)
    assert cloud.terminated == [record.group.client_token]
    other = started(run=2).record()
    with pytest.raises(SkyNomadInputError, match="not this task's job"):
        worker.on_kill(other)

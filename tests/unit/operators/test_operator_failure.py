"""A task that fails for good terminates what its job launched; one with a retry left keeps it."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.jobs.record import RECORD_KEY
from airflow_provider_skynomad.jobs.worker import JobWorker

from .test_operator import FakeStore, cloud, context_for, defer, make_op, now  # noqa: F401 - fixtures


def _fail_the_report(monkeypatch):
    def broken(self, record, outcome):
        raise RuntimeError("market database unreachable")

    monkeypatch.setattr(JobWorker, "report", broken)


@pytest.mark.parametrize(("try_number", "terminated"), [(3, True), (1, False)])  # retries=2 by default
def test_a_failure_with_no_retry_left_terminates_the_group(cloud, monkeypatch, try_number, terminated):  # noqa: F811
    store = FakeStore()
    op = make_op()
    defer(op, context_for(store, try_number=try_number))
    token = cloud.launches[0].client_token
    _fail_the_report(monkeypatch)
    outcome = {"kind": "failed", "job_id": store.get(RECORD_KEY)["job_id"], "message": "the group failed"}
    with pytest.raises(RuntimeError, match="unreachable"):
        op.execute_complete(context_for(store, try_number=try_number), outcome)
    assert (token in cloud.terminated) is terminated


def test_a_job_its_controller_stopped_says_why_in_the_tasks_error_its_record_and_its_dashboard_row(cloud):  # noqa: F811
    from airflow_provider_skynomad.jobs.errors import SkyNomadJobFailed
    from airflow_provider_skynomad.jobs.record import STATUS_KEY
    from airflow_provider_skynomad.plugin.facts import dashboard_row

    store = FakeStore()
    op = make_op()
    defer(op, context_for(store, try_number=3))  # no retry left
    job_id = store.get(RECORD_KEY)["job_id"]
    why = f"SkyNomad job {job_id} stopped: the cloud API did not answer a status poll for 6 decision steps in a row"
    outcome = {"kind": "failed", "job_id": job_id, "message": why}
    with pytest.raises(SkyNomadJobFailed, match="did not answer a status poll"):  # the task's log
        op.execute_complete(context_for(store, try_number=3), outcome)
    record, status = store.get(RECORD_KEY), store.get(STATUS_KEY)
    assert status["state"] == "failed" and status["reason"] == why
    assert [n["reason"] for n in record["timeline"] if n["event"] == "failed"] == [why]  # the job page's story
    assert dashboard_row("failed", record, status)["reason"] == why

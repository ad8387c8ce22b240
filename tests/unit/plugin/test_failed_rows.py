"""Every failed row of the jobs dashboard says why: the reason its job published, the failure its
record noted, or (a task that failed before its job started, which writes nothing) where to read it."""

from __future__ import annotations

from tests.support.plugin_seed import finished_record, running_record

from .test_hostile_fields import inert_text


def _page(*jobs) -> str:
    from airflow_provider_skynomad.plugin.pages import dashboard_page

    return " ".join(inert_text(dashboard_page(list(jobs), 7, lambda job: f"job/{job.run_id}")).split())


def test_a_failed_jobs_row_says_the_reason_its_job_published():
    from airflow_provider_skynomad.plugin.jobs import Job

    record, status = running_record()
    why = "SkyNomad job sn-running00000001 stopped: the cloud API did not answer a status poll for 6 decision steps"
    failed = Job("d", "r1", "t", -1, "failed", None, record, {**status, "state": "failed", "reason": why})
    text = _page(failed, Job("d", "r2", "t", -1, "success", None, finished_record()))
    assert f"r1 t failed {why}" in text
    assert "r2 t success" in text and "success the" not in text  # a row that did not fail gives no reason


def test_a_failed_jobs_row_without_a_published_reason_says_the_failure_its_record_noted():
    from airflow_provider_skynomad.plugin.facts import dashboard_row

    record, status = running_record()
    record = {**record, "timeline": [*record["timeline"], {"at_hours": 2.5, "event": "failed", "reason": "exit 3"}]}
    row = dashboard_row("failed", record, status)
    assert row["reason"] == "the group failed: exit 3"


def test_a_task_that_failed_before_its_job_started_points_to_its_log():
    from airflow_provider_skynomad.plugin.jobs import Job

    text = _page(Job("d", "r1", "t", -1, "failed", None, None, None))
    assert "r1 t failed failed before its job started (its input or settings): the first ERROR line" in text
    upstream = _page(Job("d", "r2", "t", -1, "upstream_failed", None, None, None))
    assert "upstream_failed an upstream task failed: this one never ran" in upstream


def test_a_job_that_missed_its_deadline_says_so():
    from airflow_provider_skynomad.plugin.facts import dashboard_row

    record = finished_record()
    record["summary"] = {**record["summary"], "deadline_met": False}
    assert dashboard_row("failed", record, None)["reason"] == "it finished after its deadline"


def test_a_failed_probe_task_is_a_dashboard_row_with_its_reason_and_a_successful_one_is_not(seeded):
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import update

    from airflow_provider_skynomad.plugin.jobs import list_jobs
    from tests.support.plugin_seed import insert_task, write_state

    dag = "skynomad_probe_rows"
    why = "the probe of gcp/us-central1 failed while opening the market table: OperationalError: no such host"
    for run, state in (("failed_run", "failed"), ("good_run", "success")):
        insert_task(dag, run, "probe", state)
    with create_session() as session:
        session.execute(update(TI).where(TI.dag_id == dag).values(operator="SkyNomadProbeOperator"))
    write_state(dag, "failed_run", "probe", None, {"state": "failed", "reason": why})
    found = list_jobs({dag}, days=1)
    assert [(job.run_id, job.ti_state) for job in found] == [("failed_run", "failed")]
    assert f"failed_run probe failed {why}" in _page(*found)

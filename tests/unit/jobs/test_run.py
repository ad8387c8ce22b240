"""One job's record and what acts on it (jobs/run.py): the stale rule from the connection, the policy
built once by name, the clock the record counts on, and what every group of the job runs."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_skynomad.clouds.tags import JOB
from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.narrate import say
from airflow_provider_skynomad.workload import default_workload


def simulated(speed: float) -> SkyNomadConfig:
    return SkyNomadConfig(market_url="sqlite://", cloud="simulated", speed=speed)


def test_the_job_runtime_takes_its_stale_rule_from_the_connections_probe_schedule(monkeypatch):
    import logging

    from airflow_provider_skynomad.jobs.contract import TaskIdentity
    from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
    from airflow_provider_skynomad.jobs.record import StateStore
    from airflow_provider_skynomad.jobs.run import JobRun

    def runner():
        task = TaskIdentity("dag", "manual__1", "job", -1, 1, 2, "0190a7e2-0000-7000-8000-000000000001")
        return JobRun(
            params=None, config=simulated(300.0), cloud=None, store=StateStore(None), task=task,
            log=logging.getLogger("t"), table_factory=lambda: None,
        )  # fmt: skip

    monkeypatch.delenv("SKYNOMAD_MAX_MARKET_AGE_HOURS", raising=False)
    monkeypatch.delenv("SKYNOMAD_PROBE_INTERVAL_MINUTES", raising=False)
    assert runner().stale.late_after_hours == pytest.approx(10.0)  # two 5 h rounds at 300x
    monkeypatch.setenv("SKYNOMAD_PROBE_INTERVAL_MINUTES", "soon")
    with pytest.raises(SkyNomadInputError, match="SKYNOMAD_PROBE_INTERVAL_MINUTES must be a positive number"):
        runner()


def test_every_group_runs_the_declared_work_with_the_declared_cold_start_tagged_with_the_job(started):
    job = started(work_hours=6.0)
    run = job.controller().steps.run
    workload = run.workload()
    assert workload.command == tuple(default_workload(6.0))  # the declared work, never the planning bound
    assert workload.env["SKYNOMAD_COLD_START_HOURS"] == "0.2"
    assert workload.tags[JOB] == run.record.job_id


def test_a_policy_named_that_no_registry_knows_is_an_input_error(started):
    run = started().controller().steps.run
    with pytest.raises(SkyNomadInputError):
        run.policy = "no-such-policy"


def test_the_elapsed_hours_count_from_the_jobs_start_on_the_clouds_clock(started, cloud):
    run = started().controller().steps.run
    cloud.hours = run.record.job_start_hours + 2.5
    assert run.elapsed() == pytest.approx(2.5)


def test_a_timeline_item_is_said_in_plain_words_at_the_level_asked(started, caplog):
    run = started().controller().steps.run
    item = run.record.timeline[0]
    with caplog.at_level(logging.DEBUG, logger="test.jobs"):
        run.say(item, logging.DEBUG)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "test.jobs"]
    assert said[-1] == (logging.DEBUG, say(item))

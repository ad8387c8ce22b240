"""One job's record and what acts on it (jobs/run.py): the stale rule from the connection, the policy
built once by name, the clock the record counts on, and what every group of the job runs. Refused spot
launches take cloud time; the job must not pay for them with its deadline."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_skynomad.clouds.base import CapacityError
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


def _every_spot_refusal_takes(cloud, hours: float) -> None:
    """Every spot launch is refused, and each refusal moves the cloud's clock (an API round trip on a
    crowded account, at a fast simulated clock)."""
    launch = cloud.launch

    def refusing(request):
        if request.spot:
            cloud.launches.append(request)
            cloud.hours += hours
            raise CapacityError(f"{request.zone} full")
        return launch(request)

    cloud.launch = refusing


def test_when_the_refusals_used_up_the_slack_the_job_starts_on_demand_at_once(started, cloud):
    _every_spot_refusal_takes(cloud, 0.25)
    job = started(work_hours=6.0, deadline_hours=7.5)
    record = job.record()
    spot_tries = [r for r in cloud.launches if r.spot]
    assert len(spot_tries) >= 2, "the planner should have tried spot first"
    assert record.group is not None and not record.group.spot  # on-demand now, not idle until the next step
    assert record.on_safety_net
    pressure = [n for n in record.timeline if n["event"] == "deadline pressure"]
    assert pressure and pressure[-1]["at_hours"] > 0.0  # said at the moment it was found, after the tries
    assert record.segments[-1].start_hours == pressure[-1]["at_hours"]


def test_refusals_that_leave_waiting_safe_leave_the_job_idle(started, cloud):
    _every_spot_refusal_takes(cloud, 0.0)
    job = started(work_hours=6.0, deadline_hours=12.0)
    record = job.record()
    assert record.group is None and not record.on_safety_net
    assert not [n for n in record.timeline if n["event"] == "deadline pressure"]

"""The dashboard's zone cell says where a job runs now (or ended) and where else it ran, not only its last zone."""

from __future__ import annotations

import copy

from tests.support.plugin_seed import FINISHED_ZONES, finished_record, running_record

from .test_hostile_fields import inert_text


def _page(*jobs) -> str:
    from airflow_provider_skynomad.plugin.pages import dashboard_page

    return " ".join(inert_text(dashboard_page(list(jobs), 7, lambda job: f"job/{job.run_id}")).split())


def _moved(record: dict, zones: list[str]) -> dict:
    """`record` with one closed segment in each of `zones` before its own, in that order."""
    record = copy.deepcopy(record)
    first = record["segments"][0]
    earlier = [
        {**first, "zone": zone, "start_hours": 0.1 * i, "end_hours": 0.1 * (i + 1), "end": "preempted"}
        for i, zone in enumerate(zones)
    ]
    record["segments"] = earlier + record["segments"]
    return record


def test_a_finished_job_that_ran_in_three_zones_shows_the_last_and_the_other_two():
    from airflow_provider_skynomad.plugin.facts import dashboard_row
    from airflow_provider_skynomad.plugin.jobs import Job

    a, b, c = FINISHED_ZONES
    row = dashboard_row("success", finished_record(), None)
    assert row["zone"] == c and row["other_zones"] == [a, b]
    text = _page(Job("d", "r1", "t", -1, "success", None, finished_record()))
    assert f"r1 t success {c} (also {a}, {b}) 100%" in text


def test_a_running_job_shows_the_zone_it_runs_in_now_and_the_ones_it_left():
    from airflow_provider_skynomad.plugin.jobs import Job

    record, status = running_record(zone="us-west1-a")
    record = _moved(record, ["us-east4-a", "us-central1-a"])
    text = _page(Job("d", "r1", "t", -1, "deferred", None, record, status))
    assert "r1 t deferred us-west1-a (also us-east4-a, us-central1-a)" in text


def test_a_job_that_never_moved_shows_its_zone_alone():
    from airflow_provider_skynomad.plugin.jobs import Job

    record, status = running_record(zone="us-west1-a")
    text = _page(Job("d", "r1", "t", -1, "deferred", None, record, status))
    assert "r1 t deferred us-west1-a 40%" in text and "(also" not in text


def test_a_zone_it_came_back_to_is_where_it_runs_and_not_also_among_the_others():
    from airflow_provider_skynomad.plugin.facts import dashboard_row

    record, status = running_record(zone="us-west1-a")
    record = _moved(record, ["us-west1-a", "us-east4-a"])
    row = dashboard_row("deferred", record, status)
    assert row["zone"] == "us-west1-a" and row["other_zones"] == ["us-east4-a"]


def test_a_job_that_moved_often_names_three_other_zones_and_counts_the_rest():
    from airflow_provider_skynomad.plugin.jobs import Job

    record, status = running_record(zone="us-west1-a")
    record = _moved(record, ["z1", "z2", "z3", "z4", "z5"])
    text = _page(Job("d", "r1", "t", -1, "deferred", None, record, status))
    assert "us-west1-a (also z1, z2, z3 and 2 more)" in text


def test_a_job_without_a_record_has_no_zone_and_no_others():
    from airflow_provider_skynomad.plugin.facts import dashboard_row
    from airflow_provider_skynomad.plugin.jobs import Job

    assert dashboard_row("failed", None, None)["other_zones"] == []
    assert "(also" not in _page(Job("d", "r1", "t", -1, "failed", None, None, None))


def _launching(zone: str) -> dict:
    """A job's record as the worker saves it just before its first launch: the request written down
    (``pending``), nothing launched yet, no live status."""
    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.jobs.record import JobRecord, PendingLaunch
    from airflow_provider_skynomad.planner.actions import Mode, Option
    from airflow_provider_skynomad.planner.job import JobSpec, JobState

    record = JobRecord(
        job_id="sn-launching000001",
        job=JobSpec(work_hours=6.0, deadline_hours=12.0, cold_start_hours=0.2),
        job_start_hours=0.0,
        deadline_hours=12.0,
        zones=[zone, "us-central1-a"],
        instance_types=None,
        policy="skynomad",
        state=JobState(),
        all_on_demand_usd=63.96,
    )
    record.note(0.0, "start", work_h=6.0, deadline_h=12.0, zones=2, policy="skynomad")
    request = LaunchRequest("simulated", zone.rsplit("-", 1)[0], zone, "a3-highgpu-1g", 1, True, "tok")
    record.pending = PendingLaunch(request, Option(zone, Mode.SPOT), 0.0)
    record.launches = 1
    return record.to_dict()


def test_a_job_launching_before_its_first_live_status_shows_the_zone_of_its_launch():
    from airflow_provider_skynomad.plugin.facts import dashboard_row
    from airflow_provider_skynomad.plugin.jobs import Job

    row = dashboard_row("running", _launching("us-east4-a"), None)
    assert row["zone"] == "us-east4-a" and row["other_zones"] == []
    text = _page(Job("d", "r1", "t", -1, "running", None, _launching("us-east4-a"), None))
    assert "r1 t running us-east4-a 0%" in text


def test_before_its_first_live_status_a_job_is_where_its_record_last_launched_it_and_has_spent_what_it_says():
    from airflow_provider_skynomad.plugin.facts import dashboard_row

    record, _status = running_record(zone="us-west1-a")
    record = _moved(record, ["us-west1-a", "us-east4-a"])  # back in us-west1-a after us-east4-a
    row = dashboard_row("deferred", record, None)
    assert row["zone"] == "us-west1-a" and row["other_zones"] == ["us-east4-a"]
    # 0.2 h in the two earlier segments and 4.5 h open in the last, all at $2.30/h: the record's bill so far
    assert row["spend"] == round((0.2 + 4.5) * 2.3, 2)


def test_the_job_page_of_a_job_launching_its_first_group_says_where():
    from airflow_provider_skynomad.plugin.facts import job_facts
    from airflow_provider_skynomad.plugin.pages import job_page

    text = " ".join(inert_text(job_page("t", "running", job_facts(_launching("us-east4-a")))).split())
    assert "ran in launching in us-east4-a" in text and "no zone yet" not in text

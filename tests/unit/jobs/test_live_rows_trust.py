"""Break 3 of issue 31: what one row of the live-status table can do to the deployment's other jobs.

The rows are forged straight into the table, as anyone who can write it could: stamped in the
future, claiming more instances than any job may hold, or naming a launch time no clock reaches.
A job reads them as advice it may ignore; none of them stalls or crashes it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.live_rows import forge


def zones(gcp_frame) -> list[str]:
    return sorted(gcp_frame["zone"].unique())


def holding(job_id: str, zone: str, instances: int, since: float = 0.0) -> dict:
    return {
        "job_id": job_id,
        "state": "running",
        "zone": zone,
        "market": zone,
        "mode": "spot",
        "instances": instances,
        "launched_at_cloud_hours": since,
        "slack_hours": 0.1,
    }


def waiting(job_id: str, zone: str, instances: int) -> dict:
    return {
        "job_id": job_id,
        "state": "idle",
        "zone": None,
        "market": None,
        "mode": None,
        "instances": instances,
        "launched_at_cloud_hours": None,
        "slack_hours": -5.0,
        "wants": zone,
    }


@pytest.mark.parametrize(
    "instances, stamped",
    [(10_000, timedelta(days=365)), (10**9, timedelta(0))],
    ids=["stamped-a-year-ahead", "a-billion-instances"],
)
def test_break_3_forged_rows_do_not_stall_a_job_it_launches_spot(started, cloud, gcp_frame, instances, stamped):
    """Every zone claimed by rows that are either stamped in the future (they would never grow old)
    or claim more than any job may hold: the job still launches spot rather than waiting and
    going on-demand."""
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    url = SkyNomadConfig.default().market_url
    at = datetime.now(UTC) + stamped
    for n, zone in enumerate(zones(gcp_frame)):
        forge(url, f"forged-hold-{n}", holding(f"forged-hold-{n}", zone, instances), at)
        forge(url, f"forged-want-{n}", waiting(f"forged-want-{n}", zone, instances), at)
    job = started(instances=1)
    assert cloud.launches, "the job launched nothing"
    assert cloud.launches[0].spot, cloud.launches
    assert job.record().group is not None and job.record().group.spot


BAD_SINCE = [-1e9, 1e9, math.nan, math.inf, -math.inf, "soon", True]


@pytest.mark.parametrize("since", BAD_SINCE, ids=repr)
def test_break_3_a_row_with_an_impossible_launch_time_does_not_break_a_new_jobs_start(started, cloud, gcp_frame, since):
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    url = SkyNomadConfig.default().market_url
    for n, zone in enumerate(zones(gcp_frame)):
        forge(url, f"forged-{n}", holding(f"forged-{n}", zone, 4, since=since))
    cloud.hours = 10.0 / 60  # a clock between whole hours, as a real one almost always is
    job = started(instances=1)
    assert job.record().group is not None


@pytest.mark.parametrize("since", BAD_SINCE, ids=repr)
def test_break_3_a_row_with_an_impossible_launch_time_does_not_break_a_controllers_step(
    started, cloud, gcp_frame, since
):
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    job = started(instances=1)
    controller = job.controller()
    url = SkyNomadConfig.default().market_url
    for n, zone in enumerate(zones(gcp_frame)):
        forge(url, f"forged-{n}", holding(f"forged-{n}", zone, 4, since=since))
    for _ in range(3):
        cloud.hours += 10.0 / 60
        controller.step()
    assert not controller.finished or controller.steps.record.summary is not None


def test_the_worker_publishes_its_launch_as_the_holder_of_the_record_it_handed_over(started, cloud):
    """The worker's status reaches the other jobs once its record is in the job table, under the
    version it wrote; the controller that takes the job over publishes under its own."""
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
    from airflow_provider_skynomad.jobs.live import LiveStatusTable

    job = started(instances=1)
    with LiveStatusTable(SkyNomadConfig.default().market_url) as board:
        published = board.read([job.args.job_id])[job.args.job_id]
        assert published["state"] == "running" and published["zone"] == job.record().group.zone
        controller = job.controller()
        cloud.hours += 10.0 / 60
        controller.step()
        controller.publish()
        assert board.read([job.args.job_id])[job.args.job_id]["elapsed_hours"] > published["elapsed_hours"]

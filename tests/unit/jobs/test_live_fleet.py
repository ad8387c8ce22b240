"""The fleet a job reads from the live-status table: what the deployment's other running jobs hold."""

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from airflow_provider_skynomad.jobs.live import FLEET_FIELDS, LiveStatusTable, fleet_rows, job_live_status
from tests.support.live_rows import publish_held


def _status(job_id, state="running", market="gcp/us-east4-a/H100", mode="spot", since=10.0):
    return {
        "job_id": job_id,
        "state": state,
        "market": market,
        "mode": mode,
        "instances": 4,
        "launched_at_cloud_hours": since,
        "slack_hours": 1.5,
        "zone": "us-east4-a",
    }


def test_only_other_jobs_holding_a_group_or_waiting_for_spot_count(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    table = LiveStatusTable(url)
    try:
        publish_held(url, "me", _status("me"))
        publish_held(url, "other", _status("other", since=5.0))
        publish_held(url, "done", _status("done", state="finished"))
        publish_held(url, "idle", _status("idle", state="idle", market=None, mode=None, since=None))
        waiting = {**_status("waiting", state="idle", market=None, mode=None, since=None), "wants": "us-east4-b"}
        publish_held(url, "waiting", waiting)
        publish_held(url, "gone", _status("gone"))
        with table.engine.begin() as conn:  # a job whose trigger stopped publishing long ago
            old = datetime.now(UTC) - timedelta(hours=1)
            conn.execute(update(job_live_status).where(job_live_status.c.job_id == "gone").values(updated_at=old))
        rows = sorted(table.fleet(exclude_job_id="me"), key=lambda r: r["job_id"])
    finally:
        table.close()
    assert rows == [
        {
            "job_id": "other",
            "market": "gcp/us-east4-a/H100",
            "zone": "us-east4-a",
            "mode": "spot",
            "instances": 4,
            "launched_at_cloud_hours": 5.0,
            "slack_hours": 1.5,
            "wants": None,
        },
        {
            "job_id": "waiting",
            "market": None,
            "zone": "us-east4-a",
            "mode": None,
            "instances": 4,
            "launched_at_cloud_hours": None,
            "slack_hours": 1.5,
            "wants": "us-east4-b",
        },
    ]
    assert set(rows[0]) == set(FLEET_FIELDS)  # plain data only


def test_a_row_just_inside_the_age_limit_counts():
    now = datetime.now(UTC)
    rows = fleet_rows([(now - timedelta(seconds=299), _status("a"))], exclude_job_id=None, now=now)
    assert [r["job_id"] for r in rows] == ["a"]


def test_break_3_a_row_stamped_later_than_now_or_claiming_more_than_a_gang_holds_nothing():
    """A row stamped in the future would never grow old: it is ignored (a minute of clock skew
    aside), as is a row claiming more instances than any job may ask for."""
    now = datetime.now(UTC)
    statuses = [
        (now - timedelta(seconds=10), _status("fine")),
        (now + timedelta(seconds=30), _status("skewed")),
        (now + timedelta(hours=1), _status("ahead")),
        (now + timedelta(days=3650), _status("decade")),
        (now, {**_status("many"), "instances": 10_001}),
        (now, {**_status("waiting-many", state="idle", mode=None, since=None), "instances": 10**9, "wants": "b"}),
        (now, {**_status("loose"), "slack_hours": float("inf")}),
        (now, {**_status("launch"), "launched_at_cloud_hours": float("nan")}),
        (now, None),
        (now, ["not", "a", "status"]),
    ]
    assert [r["job_id"] for r in fleet_rows(statuses, exclude_job_id=None, now=now)] == ["fine", "skewed"]

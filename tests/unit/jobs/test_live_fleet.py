"""The fleet a job reads from the live-status table: what the deployment's other running jobs hold."""

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from airflow_provider_skynomad.jobs.live import FLEET_FIELDS, LiveStatusTable, fleet_rows, job_live_status


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
    table = LiveStatusTable(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        table.publish("me", _status("me"))
        table.publish("other", _status("other", since=5.0))
        table.publish("done", _status("done", state="finished"))
        table.publish("idle", _status("idle", state="idle", market=None, mode=None, since=None))
        waiting = {**_status("waiting", state="idle", market=None, mode=None, since=None), "wants": "us-east4-b"}
        table.publish("waiting", waiting)
        table.publish("gone", _status("gone"))
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

"""The live-status table a job's controller publishes to (jobs/live.py), on both backends, and the fleet
a job reads from it: what the deployment's other running jobs hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from airflow_provider_skynomad.jobs.live import (
    FLEET_FIELDS,
    LiveStatusTable,
    fleet_rows,
    job_live_status,
    newer_status,
)
from tests.support.live_rows import hold, publish_held

WORKER = {"job_id": "sn-a-1", "state": "running", "zone": "us-east4-a", "elapsed_hours": 2.0, "progress_pct": 20.0}


def test_a_job_has_one_row_the_newest_status_replaces(market_url):
    table = LiveStatusTable(market_url)
    a, b = hold(market_url, "sn-a-1"), hold(market_url, "sn-b-1")  # each job's record, held by its controller
    try:
        assert table.read(["sn-a-1"]) == {}
        table.publish("sn-a-1", {**WORKER, "elapsed_hours": 2.5}, owner=a[0], version=a[1])
        table.publish("sn-a-1", {**WORKER, "elapsed_hours": 3.0}, owner=a[0], version=a[1])
        table.publish("sn-b-1", {**WORKER, "job_id": "sn-b-1"}, owner=b[0], version=b[1])
        rows = table.read(["sn-a-1", "sn-b-1", "sn-none"])
        assert rows["sn-a-1"]["elapsed_hours"] == 3.0 and set(rows) == {"sn-a-1", "sn-b-1"}
    finally:
        table.close()


def test_only_a_later_look_at_the_same_unfinished_job_is_laid_over_the_workers_status():
    later = {**WORKER, "elapsed_hours": 2.5, "progress_pct": 30.0, "slack_hours": 1.0}
    assert newer_status(WORKER, later)["progress_pct"] == 30.0
    assert newer_status(WORKER, {**later, "elapsed_hours": 1.5}) == WORKER  # older than the worker's visit
    assert newer_status(WORKER, {**later, "job_id": "sn-a-2"}) == WORKER  # a cleared task's old job
    assert newer_status({**WORKER, "state": "finished"}, later)["state"] == "finished"
    assert newer_status(None, later) is None and newer_status(WORKER, None) == WORKER


def test_break_3_a_controller_that_lost_control_does_not_change_the_live_row(market_url):
    """Two copies of one job's trigger: once the second took the record, the first one's status
    (a stale version) is not published; the holder's is."""
    from airflow_provider_skynomad.jobs.record import JobRecord
    from airflow_provider_skynomad.jobs.table import JobTable, TableStore
    from tests.support.plugin_seed import running_record

    record, status = running_record("sn-a-1")
    jobs, board = JobTable(market_url), LiveStatusTable(market_url)
    try:
        jobs.put(JobRecord.from_dict(record), owner="worker try 1", task_key="sn-a")
        first, _ = TableStore.take(jobs, "sn-a-1", "trigger-first", board=board, task_key="sn-a")
        first.save_status({**status, "elapsed_hours": 5.0})
        second, _ = TableStore.take(jobs, "sn-a-1", "trigger-second", board=board, task_key="sn-a")
        first.save_status({**status, "elapsed_hours": 6.0, "zone": "us-east4-a"})
        assert board.read(["sn-a-1"])["sn-a-1"]["elapsed_hours"] == 5.0  # the lost copy changed nothing
        assert not board.publish("sn-a-1", status, owner="trigger-first", version=first.version)
        assert not board.publish("sn-a-1", status, owner="trigger-first", version=second.version)  # not its owner
        second.save_status({**status, "elapsed_hours": 7.0})
        assert board.read(["sn-a-1"])["sn-a-1"]["elapsed_hours"] == 7.0
        assert not board.publish("sn-none", {**status, "job_id": "sn-none"}, owner="x", version=1)  # no record
        assert board.read(["sn-none"]) == {}
    finally:
        board.close()
        jobs.close()


def test_break_3_the_page_reads_no_row_stamped_later_keyed_by_another_job_or_impossible(market_url, caplog):
    import logging
    import math
    from datetime import UTC, datetime, timedelta

    from tests.support.live_rows import forge

    now = datetime.now(UTC)
    good = {**WORKER, "job_id": "sn-good", "market": "us-east4-a", "mode": "spot", "instances": 4}
    good |= {"slack_hours": 1.0, "launched_at_cloud_hours": 2.0}
    forge(market_url, "sn-good", good)
    forge(market_url, "sn-skewed", {**good, "job_id": "sn-skewed"}, now + timedelta(seconds=30))
    forge(market_url, "sn-ahead", {**good, "job_id": "sn-ahead"}, now + timedelta(days=365))
    forge(market_url, "sn-other", good)  # another job's status under this id
    forge(market_url, "sn-text", "not a status")
    bad = {
        "sn-many": {"instances": 10**9},
        "sn-none": {"instances": 0},
        "sn-nan": {"slack_hours": math.nan},
        "sn-inf": {"elapsed_hours": math.inf},
        "sn-far": {"slack_hours": -1e9},
        "sn-launch": {"launched_at_cloud_hours": -math.inf},
        "sn-pct": {"progress_pct": 250.0},
        "sn-word": {"elapsed_hours": "3.5"},
        "sn-zone": {"zone": ["us-east4-a"]},
    }
    for job_id, change in bad.items():
        forge(market_url, job_id, {**good, "job_id": job_id, **change})
    names = ["sn-good", "sn-skewed", "sn-ahead", "sn-other", "sn-text", *bad]
    with (
        caplog.at_level(logging.DEBUG, logger="airflow_provider_skynomad.jobs.live"),
        LiveStatusTable(market_url) as table,
    ):
        assert set(table.read(names)) == {"sn-good", "sn-skewed"}
        assert {row["job_id"] for row in table.fleet()} == {"sn-good", "sn-skewed"}
    said = caplog.text
    assert "Ignoring the live status of job sn-ahead: it is stamped" in said
    assert "job sn-many: its instances is not a count from 1 to 10000" in said
    assert "job sn-other: it holds another job's status" in said


def test_break_3_a_later_look_that_is_not_a_number_is_not_laid_over():
    later = {**WORKER, "elapsed_hours": "9 h", "progress_pct": 90.0}
    assert newer_status(WORKER, later) == WORKER
    assert newer_status(WORKER, {**later, "elapsed_hours": float("nan")}) == WORKER


def test_a_status_published_while_another_copy_takes_the_job_over_waits_and_is_not_written(postgres_url):
    """PostgreSQL: the publish share-locks the record's row. With a take-over in flight (its write
    not yet committed) the publish waits for it, then finds its own version gone and writes nothing."""
    import threading
    import time

    from sqlalchemy import select, text, update

    from airflow_provider_skynomad.jobs.table import JobTable, job_records

    owner, version = hold(postgres_url, "sn-a-1")
    jobs, board = JobTable(postgres_url), LiveStatusTable(postgres_url)
    board.create()
    outcome = {}

    def publish():
        outcome["published"] = board.publish("sn-a-1", WORKER, owner=owner, version=version)

    try:
        with jobs.engine.connect() as takeover, takeover.begin():
            me = takeover.execute(select(text("pg_backend_pid()"))).scalar_one()
            taken = update(job_records).where(job_records.c.job_id == "sn-a-1", job_records.c.version == version)
            takeover.execute(taken.values(version=version + 1, owner="trigger-second"))
            publishing = threading.Thread(target=publish)
            publishing.start()
            waits = text("SELECT count(*) FROM pg_stat_activity WHERE :me = ANY(pg_blocking_pids(pid))")
            give_up = time.monotonic() + 120.0  # a guard against a hang, not a bound on the wait
            with jobs.engine.connect() as watcher:
                while publishing.is_alive() and time.monotonic() < give_up:
                    if watcher.execute(waits, {"me": me}).scalar_one():
                        break  # the publish waits for the take-over
                    time.sleep(0.02)
            assert publishing.is_alive(), f"the publish did not wait for the take-over: {outcome}"
        publishing.join(120.0)
        assert outcome == {"published": False}
        assert board.read(["sn-a-1"]) == {}
    finally:
        board.close()
        jobs.close()


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

"""The live-status table a job's controller publishes to (jobs/live.py), on both backends."""

from __future__ import annotations

from airflow_provider_skynomad.jobs.live import LiveStatusTable, newer_status

WORKER = {"job_id": "sn-a-1", "state": "running", "zone": "us-east4-a", "elapsed_hours": 2.0, "progress_pct": 20.0}


def test_a_job_has_one_row_the_newest_status_replaces(market_url):
    table = LiveStatusTable(market_url)
    try:
        assert table.read(["sn-a-1"]) == {}
        table.publish("sn-a-1", {**WORKER, "elapsed_hours": 2.5})
        table.publish("sn-a-1", {**WORKER, "elapsed_hours": 3.0})
        table.publish("sn-b-1", {**WORKER, "job_id": "sn-b-1"})
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

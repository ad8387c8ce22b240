"""The job record table: one versioned row per job; a write over a version that moved on is refused."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.jobs.errors import ControlLost
from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.jobs.table import JobTable, TableStore
from airflow_provider_skynomad.planner.job import JobSpec, JobState

KEY = "sn-0123456789abcdef"  # the task key of the job ids below


def _record(job_id: str = "sn-0123456789abcdef-00000001") -> JobRecord:
    job = JobSpec(work_hours=4.0, deadline_hours=6.0)
    return JobRecord(job_id, job, 0.0, 6.0, ["us-east4-a"], None, "skynomad", JobState(), 50.0)


def test_the_worker_hands_over_and_the_controller_writes_over_the_version_it_read(market_url):
    with JobTable(market_url) as table:
        record = _record()
        assert table.put(record, owner="worker try 1", task_key=KEY) == 1
        store, taken = TableStore.take(table, record.job_id, owner="trigger-a", task_key=KEY)
        assert taken.to_dict() == record.to_dict() and store.version == 2
        taken.seq = 5
        store.save(taken)
        stored = table.load(record.job_id)
        assert (stored.record.seq, stored.version, stored.owner) == (5, 3, "trigger-a")


def test_a_second_controller_takes_over_and_the_first_can_no_longer_write(market_url):
    """A triggerer failover: the copy started last wins; the other stops at its next write or check."""
    with JobTable(market_url) as table:
        record = _record()
        table.put(record, owner="worker try 1", task_key=KEY)
        first, mine = TableStore.take(table, record.job_id, owner="trigger-a", task_key=KEY)
        second, theirs = TableStore.take(table, record.job_id, owner="trigger-b", task_key=KEY)
        mine.seq = 7
        with pytest.raises(ControlLost, match="another controller"):
            first.save(mine)
        with pytest.raises(ControlLost):
            first.check()
        theirs.seq = 8
        second.save(theirs)
        assert table.load(record.job_id).record.seq == 8  # the loser's write never landed


def test_a_worker_retry_takes_the_job_back_from_a_stale_controller(market_url):
    with JobTable(market_url) as table:
        record = _record()
        table.put(record, owner="worker try 1", task_key=KEY)
        store, taken = TableStore.take(table, record.job_id, owner="trigger-a", task_key=KEY)
        table.put(taken, owner="worker try 2", task_key=KEY)  # the retry reconnects and defers again
        with pytest.raises(ControlLost):
            store.check()


def test_taking_a_job_without_a_record_says_so(market_url):
    with JobTable(market_url) as table, pytest.raises(ControlLost, match="no record"):
        TableStore.take(table, f"{KEY}-missing1", owner="trigger-a", task_key=KEY)

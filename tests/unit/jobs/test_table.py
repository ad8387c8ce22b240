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


def test_break_1_a_write_for_another_task_is_refused_and_nothing_is_written(market_url):
    """A job id taken from task state (which others can write) cannot make one task's writer
    overwrite, save over or take control of another task's row: each write states its task key."""
    from airflow_provider_skynomad.jobs.errors import SkyNomadInputError

    other = "sn-fedcba9876543210"  # another task instance's key
    with JobTable(market_url) as table:
        record = _record()
        table.put(record, owner="worker try 1", task_key=KEY)
        before = table.load(record.job_id)
        forged = _record()
        forged.seq = 99
        with pytest.raises(SkyNomadInputError, match="belongs to another task instance .*nothing was written"):
            table.put(forged, owner="worker try 2", task_key=other)
        with pytest.raises(SkyNomadInputError, match="another task instance"):
            table.save(forged, before.version, owner="worker try 2", task_key=other)
        with pytest.raises(SkyNomadInputError, match="another task instance"):
            table.claim(record.job_id, before.version, owner="trigger-x", task_key=other)
        with pytest.raises(SkyNomadInputError, match="another task instance"):
            TableStore.take(table, record.job_id, owner="trigger-x", task_key=other)
        after = table.load(record.job_id)
        assert (after.version, after.owner, after.record.seq) == (before.version, before.owner, before.record.seq)
        assert table.load(f"{other}-00000001") is None  # nor a row under the other key

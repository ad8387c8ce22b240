"""A job belongs to its task (issue 31, break 1): a UI user who may write one DAG's task state writes
another DAG's job id into it and clears or retries its task. The task must neither resume, retire nor
report that job: one clear error, nothing terminated, launched or written.

The victim is a task of DAG ``victim``; the attacker is `test_operator`'s task of DAG ``dag``, whose
own job ran first, so its task state holds a record of the right form with only the job id changed.
"""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.clouds.base import GroupHandle, GroupStatus
from airflow_provider_skynomad.jobs.record import RECORD_KEY
from airflow_provider_skynomad.jobs.table import JobTable
from airflow_provider_skynomad.operators.skynomad import SkyNomadInputError

from .test_operator import FakeStore, FakeTI, cloud, context_for, defer, make_op, now  # noqa: F401


class VictimTI(FakeTI):
    dag_id, run_id, task_id = "victim", "scheduled__2026-12-01", "train"


def victim_job(cloud) -> tuple[FakeStore, dict]:  # noqa: F811
    """The victim's running job: its task state, and its row in the job table (job id, version, owner)."""
    store = FakeStore()
    context = context_for(store)
    context["ti"] = VictimTI()
    defer(make_op(), context)
    job_id = store.get(RECORD_KEY)["job_id"]
    return store, row(job_id)


def row(job_id: str) -> dict:
    with JobTable() as jobs:
        stored = jobs.load(job_id)
    return {"job_id": job_id, "version": stored.version, "owner": stored.owner, "record": stored.record.to_dict()}


def attacker_naming(store: FakeStore, job_id: str) -> None:
    """The attacker's task state, its own record with the victim's job id written in (the public route)."""
    record = store.get(RECORD_KEY)
    store.set(RECORD_KEY, {**record, "job_id": job_id})


def assert_untouched(cloud, victim: dict, launches: int) -> None:  # noqa: F811
    assert row(victim["job_id"]) == victim  # not one write to the victim's row
    assert len(cloud.launches) == launches and cloud.terminated == []
    group = GroupHandle.from_dict(victim["record"]["group"])
    assert cloud.poll(group) is GroupStatus.RUNNING


def test_break_1_a_retry_does_not_resume_another_task_s_job(cloud):  # noqa: F811
    _, victim = victim_job(cloud)
    store = FakeStore()
    defer(make_op(), context_for(store))  # the attacker's own job
    attacker_naming(store, victim["job_id"])
    written = store.writes
    with pytest.raises(SkyNomadInputError, match="this task's state names SkyNomad job .*which is not this task's job"):
        make_op().execute(context_for(store, try_number=2))
    assert_untouched(cloud, victim, launches=2)
    assert store.writes == written


def test_break_1_a_cleared_task_does_not_retire_another_task_s_job(cloud):  # noqa: F811
    """A clear ends the task's last job before a new one starts: never another task's."""
    _, victim = victim_job(cloud)
    store = FakeStore()
    defer(make_op(retries=1), context_for(store, max_tries=1))
    attacker_naming(store, victim["job_id"])
    with pytest.raises(SkyNomadInputError, match="not this task's job"):
        make_op(retries=1).execute(context_for(store, try_number=3, max_tries=3))
    assert_untouched(cloud, victim, launches=2)


def test_break_1_a_last_try_that_fails_ends_nothing_of_another_task(cloud):  # noqa: F811
    """No retry left: the failing task ends what *its* job launched (on_kill's path), nothing else."""
    _, victim = victim_job(cloud)
    store = FakeStore()
    defer(make_op(retries=0), context_for(store, max_tries=0))
    attacker_naming(store, victim["job_id"])
    with pytest.raises(SkyNomadInputError):
        make_op(retries=0).execute(context_for(store, try_number=1, max_tries=0))
    assert_untouched(cloud, victim, launches=2)


def test_break_1_an_event_naming_another_task_s_job_is_not_reported(cloud):  # noqa: F811
    _, victim = victim_job(cloud)
    store = FakeStore()
    defer(make_op(), context_for(store))
    before = dict(store.data)
    event = {"kind": "finished", "job_id": victim["job_id"], "message": ""}
    with pytest.raises(SkyNomadInputError, match="the trigger's event names SkyNomad job"):
        make_op().execute_complete(context_for(store), event)
    assert store.data == before  # the victim's record is not copied into this task's state
    assert_untouched(cloud, victim, launches=2)


def test_a_pointer_without_a_record_in_the_job_table_is_refused_not_followed(cloud):  # noqa: F811
    """The task's own job id, but no row: the task state's copy (which anyone with the route may
    have written, its group and launch included) is never acted on."""
    store = FakeStore()
    defer(make_op(), context_for(store))
    record = store.get(RECORD_KEY)
    store.set(RECORD_KEY, {**record, "job_id": record["job_id"][:-1] + "x"})
    with pytest.raises(SkyNomadInputError, match="holds no record of it: nothing was terminated"):
        make_op().execute(context_for(store, try_number=2))
    assert len(cloud.launches) == 1 and cloud.terminated == []

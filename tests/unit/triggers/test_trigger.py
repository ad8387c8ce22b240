"""SkyNomadTrigger: the job's controller. Plain-data round trip of its contract, and what it does
in each situation: acts without ending, and yields one outcome when the job has ended."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import GroupStatus
from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger
from tests.support.airflow_env import seed_market
from tests.support.fakes import FakeCloud
from tests.unit.operators.test_operator import FakeStore, context_for, defer, latest, make_op


@pytest.fixture
def world(skynomad_home, gcp_frame, monkeypatch):
    """A market table with 48 h of history before `now`, a fake cloud whose clock starts at `now`."""
    now = gcp_frame["observed_at"].min() + pd.Timedelta(hours=60)
    seed_market(gcp_frame, until=now + pd.Timedelta(seconds=1))
    cloud = FakeCloud(now)
    monkeypatch.setattr("airflow_provider_skynomad.hooks.skynomad.make_cloud", lambda config: cloud)
    monkeypatch.setattr("airflow_provider_skynomad.operators.skynomad.make_cloud", lambda config: cloud)
    return cloud


def _started(**op_kwargs) -> tuple[SkyNomadTrigger, FakeStore]:
    """A job the worker started and handed to its trigger (steps of 10 ms of wall time)."""
    store = FakeStore()
    trigger = defer(make_op(max_wall_seconds_per_step=0.01, **op_kwargs), context_for(store))
    return SkyNomadTrigger(**{**trigger.serialize()[1], "min_event_seconds": 0.0}), store


def _outcome(trigger: SkyNomadTrigger, timeout=20.0) -> dict:
    async def first():
        return await asyncio.wait_for(anext(trigger.run()), timeout)

    return asyncio.run(first()).payload


def _when(condition, then, timeout=15.0):
    """Run `then` in a thread once `condition()` holds: the test's hand on the cloud while the trigger runs."""

    def wait():
        deadline = time.monotonic() + timeout
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.005)
        then()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_serialize_round_trip_is_plain_json(world):
    trigger, _ = _started(policy_params={"forecaster": "nelson-aalen"})
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_skynomad.triggers.skynomad.SkyNomadTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    again = SkyNomadTrigger(**kwargs)
    assert again.serialize() == (path, kwargs) and again.args == trigger.args


def test_finished_when_the_workload_succeeds(world):
    trigger, store = _started()
    world.status[world.launches[0].client_token] = GroupStatus.SUCCEEDED
    world.hours = 6.5
    outcome = _outcome(trigger)
    assert outcome == {"kind": "finished", "job_id": latest(store)["job_id"], "message": ""}
    assert make_op().execute_complete(context_for(store), outcome)["deadline_met"] is True


def test_a_preempted_group_is_relaunched_without_ending_the_trigger(world):
    trigger, store = _started(policy="eager-failover")
    first = world.launches[0]
    world.hours, world.progress_fraction = 1.0, 0.2
    world.status[first.client_token] = GroupStatus.PREEMPTED
    world.full.add(first.zone)

    def finish_the_relaunch():
        world.hours = 6.5
        world.status[world.launches[-1].client_token] = GroupStatus.SUCCEEDED

    _when(lambda: len(world.launches) == 2, finish_the_relaunch)
    outcome = _outcome(trigger)
    assert outcome["kind"] == "finished"  # one event: the end, after the relaunch the trigger made
    record = latest(store)
    assert record["preemptions"] == 1 and world.launches[1].zone != first.zone
    assert [s["end"] for s in record["segments"]] == ["preempted", "finished"]


def test_failed_group_is_reported_with_the_workloads_last_lines(world):
    trigger, _ = _started()
    world.status[world.launches[0].client_token] = GroupStatus.FAILED
    world.failure_detail = lambda handle: "ValueError: bad learning rate"
    outcome = _outcome(trigger)
    assert outcome["kind"] == "failed" and "bad learning rate" in outcome["message"]


def test_missing_connection_yields_failed_outcome(world):
    trigger, _ = _started()
    trigger.args = type(trigger.args)(**{**trigger.args.__dict__, "conn_id": "no_such_conn"})
    outcome = _outcome(trigger)
    assert outcome["kind"] == "failed" and "no_such_conn" in outcome["message"]


def _database_restarting(monkeypatch, failures: int) -> list[int]:
    """`SkyNomadTrigger._open` meets a database that is shutting down `failures` times, then opens."""
    from sqlalchemy.exc import OperationalError

    calls, real = [], SkyNomadTrigger._open

    def open_(self, config):
        calls.append(1)
        if len(calls) <= failures:
            raise OperationalError("SELECT", {}, Exception("FATAL:  the database system is shutting down"))
        return real(self, config)

    monkeypatch.setattr(SkyNomadTrigger, "_open", open_)
    return calls


def test_a_trigger_started_while_the_database_restarts_opens_when_it_answers(world, monkeypatch):
    """A triggerer's triggers are re-assigned at any moment: one that starts during a PostgreSQL
    restart failed its job ("the job's controller could not start: OperationalError")."""
    trigger, _ = _started()
    calls = _database_restarting(monkeypatch, failures=2)
    world.status[world.launches[0].client_token] = GroupStatus.SUCCEEDED
    world.hours = 6.5
    assert _outcome(trigger)["kind"] == "finished"
    assert len(calls) == 3


def test_a_database_that_never_answers_fails_the_job_in_words_after_the_controllers_patience(world, monkeypatch):
    from airflow_provider_skynomad.jobs.controller import MAX_DB_STEPS

    trigger, _ = _started()
    calls = _database_restarting(monkeypatch, failures=100)
    outcome = _outcome(trigger)
    assert outcome["kind"] == "failed" and "the database system is shutting down" in outcome["message"]
    assert len(calls) == MAX_DB_STEPS


def test_an_outcome_is_held_until_the_workers_hold_has_passed(world):
    """Airflow 3.3 can lose a try to an event within seconds of the deferral (apache/airflow#72716)."""
    trigger, _ = _started()
    trigger = SkyNomadTrigger(**{**trigger.serialize()[1], "min_event_seconds": 1.0})
    world.status[world.launches[0].client_token] = GroupStatus.SUCCEEDED
    started = time.monotonic()
    assert _outcome(trigger)["kind"] == "finished"
    assert time.monotonic() - started >= 1.0


def test_a_copy_that_lost_control_ends_without_an_event(world):
    """Two copies of one trigger (a triggerer failover): the one started last controls the job."""
    from airflow_provider_skynomad.jobs.record import task_key_of
    from airflow_provider_skynomad.jobs.table import JobTable, TableStore

    trigger, store = _started(policy="eager-failover")
    first = world.launches[0]
    world.hours, world.progress_fraction = 1.0, 0.2

    def take_over_then_preempt():
        with JobTable() as jobs:
            job_id = latest(store)["job_id"]
            TableStore.take(jobs, job_id, owner="trigger-elsewhere", task_key=task_key_of(job_id))
        world.status[first.client_token] = GroupStatus.PREEMPTED

    async def run():
        events = []
        async for event in trigger.run():
            events.append(event)
        return events

    def controlled() -> bool:
        with JobTable() as jobs:
            return jobs.load(latest(store)["job_id"]).owner.startswith("trigger-")

    _when(controlled, take_over_then_preempt)
    assert asyncio.run(asyncio.wait_for(run(), 20)) == []
    assert len(world.launches) == 1  # the copy that lost control launched nothing


def test_a_controlling_trigger_publishes_where_the_job_stands(world):
    """The job page needs no worker: every few wall seconds the trigger writes the checkpointed
    progress, slack and spend to the live-status table (jobs/live.py)."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable

    trigger, store = _started()
    world.tick_hours, world.progress_fraction = 0.01, 0.5  # time passes; half the work is checkpointed
    job_id = latest(store)["job_id"]

    def published() -> dict:
        with LiveStatusTable() as table:
            return table.read([job_id]).get(job_id) or {}

    async def run_until_published():
        """The trigger's loop until its first look is on the board (a busy box may take seconds)."""
        running = asyncio.ensure_future(anext(trigger.run()))
        stop = time.monotonic() + 20.0
        while time.monotonic() < stop and not running.done() and published().get("progress_pct") != 50.0:
            await asyncio.sleep(0.1)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await running

    asyncio.run(run_until_published())
    status = published()
    assert status["progress_pct"] == 50.0 and status["zone"] == world.launches[0].zone and status["elapsed_hours"] > 0
    assert status["spend_usd"] > 0 and status["mode"] == "spot"
    assert status["slack_hours"] == pytest.approx(10.0 - status["elapsed_hours"] - 3.0 - 0.2, abs=0.01)


def test_break_1_a_trigger_whose_arguments_name_another_task_s_job_controls_nothing(world):
    """A trigger controls only the job of the task it was deferred from: arguments naming another
    task's job, or a task other than the triggerer's task instance, end in one failed outcome."""
    from types import SimpleNamespace

    from airflow_provider_skynomad.jobs.table import JobTable

    victim, _ = _started()
    with JobTable() as jobs:
        before = jobs.load(victim.args.job_id)
    kwargs = victim.serialize()[1]
    foreign = SkyNomadTrigger(**{**kwargs, "task": {**kwargs["task"], "dag_id": "attacker"}})
    outcome = _outcome(foreign)
    assert outcome["kind"] == "failed" and "which is not this task's job" in outcome["message"]
    elsewhere = SkyNomadTrigger(**kwargs)
    elsewhere.task_instance = SimpleNamespace(dag_id="attacker", run_id="r", task_id="job", map_index=-1)
    outcome = _outcome(elsewhere)
    assert outcome["kind"] == "failed" and "not the task it was deferred from" in outcome["message"]
    with JobTable() as jobs:
        after = jobs.load(victim.args.job_id)
    assert (after.version, after.owner) == (before.version, before.owner)
    assert len(world.launches) == 1 and world.terminated == []

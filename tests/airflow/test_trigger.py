"""SkyNomadTrigger: plain-data round trip, and the one event it yields for each situation."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import GroupHandle, GroupStatus, LaunchRequest
from airflow_provider_skynomad.jobs.watch import Watch
from airflow_provider_skynomad.planner import registry
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

from .conftest import seed_market
from .fakes import FakeCloud

ZONE = "us-central1-a"


@pytest.fixture
def world(skynomad_home, gcp_frame, monkeypatch):
    """A market table with 48 h of history before `now`, a fake cloud whose clock starts at `now`."""
    now = gcp_frame["observed_at"].min() + pd.Timedelta(hours=60)
    seed_market(gcp_frame, until=now + pd.Timedelta(seconds=1))
    cloud = FakeCloud(now)
    monkeypatch.setattr("airflow_provider_skynomad.hooks.skynomad.make_cloud", lambda config: cloud)
    return cloud


def _launch(cloud: FakeCloud, zone=ZONE, spot=True, token="tok-1") -> GroupHandle:
    return cloud.launch(LaunchRequest("gcp", zone.rsplit("-", 1)[0], zone, "a3-highgpu-1g", 1, spot, token))


def _trigger(
    handle: GroupHandle | None,
    *,
    work=6.0,
    deadline=10.0,
    elapsed=0.0,
    progress=0.0,
    policy="skynomad",
    running_since=0.0,
    mode=Mode.SPOT,
    seq=3,
    params=None,
    step_wall=0.01,
    step_hours=1 / 6,
) -> SkyNomadTrigger:
    running = Option(handle.zone, mode) if handle else None
    state = JobState(
        elapsed_hours=elapsed,
        progress_hours=progress,
        running=running,
        running_since_hours=running_since,
        checkpoint_market=handle.zone if handle else None,
    )
    return SkyNomadTrigger(
        job=JobSpec(work_hours=work, deadline_hours=deadline).to_dict(),
        job_start_hours=0.0,
        state=state.to_dict(),
        group=handle.to_dict() if handle else None,
        launch_delay_hours=0.2,
        zones=[ZONE, "us-east4-a", "europe-west1-c"],
        instance_types=None,
        policy=policy,
        policy_params=params or {},
        decision_step_hours=step_hours,
        seq=seq,
        skynomad_conn_id="skynomad_default",
        max_wall_seconds_per_step=step_wall,
    )


def _first_event(trigger: SkyNomadTrigger, timeout=20.0) -> dict:
    async def first():
        return await asyncio.wait_for(anext(trigger.run()), timeout)

    return asyncio.run(first()).payload


class Scripted:
    """A policy that always returns the same decision (the trigger must not care why)."""

    name = "scripted"

    def __init__(self, first=None, mode="spot"):
        self.decision = Decision(try_in_order=(Option(first, Mode(mode)) if first else None,), reason="scripted")

    def decide(self, job, state, view, now):
        return self.decision


def test_serialize_round_trip_is_plain_json(world):
    trigger = _trigger(_launch(world), params={"forecaster": "x"})
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_skynomad.triggers.skynomad.SkyNomadTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs  # plain data only
    again = SkyNomadTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_finished_when_the_workload_succeeds(world):
    handle = _launch(world)
    world.status[handle.client_token] = GroupStatus.SUCCEEDED
    event = _first_event(_trigger(handle))
    assert event["kind"] == "finished" and event["seq"] == 3


def test_preempted_when_the_group_is_lost(world):
    handle = _launch(world)
    world.progress_fraction = 0.25
    world.status[handle.client_token] = GroupStatus.PREEMPTED
    event = _first_event(_trigger(handle))
    assert event["kind"] == "preempted"
    assert event["progress_hours"] == pytest.approx(1.5)


def test_failed_group_is_reported(world):
    handle = _launch(world)
    world.status[handle.client_token] = GroupStatus.FAILED
    assert _first_event(_trigger(handle))["kind"] == "failed"


def test_replan_carries_the_planners_new_decision(world, monkeypatch):
    monkeypatch.setitem(registry.POLICIES, "scripted", lambda **_: Scripted("us-east4-a"))
    handle = _launch(world)
    world.progress_fraction = 0.1
    world.hours = 1.0
    event = _first_event(_trigger(handle, policy="scripted", elapsed=1.0))
    assert event["kind"] == "replan"
    decision = Decision.from_dict(event["decision"])
    assert decision.try_in_order[0] == Option("us-east4-a", Mode.SPOT)


def test_stays_quiet_while_the_planner_agrees(world, monkeypatch):
    monkeypatch.setitem(registry.POLICIES, "scripted", lambda **_: Scripted(ZONE))
    handle = _launch(world)
    world.tick_hours = 0.01  # time passes; the planner keeps saying "stay"

    async def run_briefly():
        try:
            await asyncio.wait_for(anext(_trigger(handle, policy="scripted").run()), 0.5)
        except TimeoutError:
            return None
        return "event"

    assert asyncio.run(run_briefly()) is None


def test_deadline_pressure_when_staying_on_spot_is_no_longer_safe(world):
    # 5 h of 6 h left, 5.1 h to the deadline: one more spot step could leave no on-demand rescue.
    handle = _launch(world)
    world.hours = 4.9
    world.progress_fraction = 1.0 / 6.0
    event = _first_event(_trigger(handle, elapsed=4.9, progress=1.0, running_since=0.0))
    assert event["kind"] == "deadline_pressure"
    first = Decision.from_dict(event["decision"]).try_in_order[0]
    assert first is not None and first.mode is Mode.ON_DEMAND


def test_idle_job_is_woken_when_the_planner_wants_to_launch(world):
    event = _first_event(_trigger(None))
    assert event["kind"] in ("replan", "deadline_pressure")
    assert Decision.from_dict(event["decision"]).try_in_order[0] is not None


def test_missing_connection_yields_failed_event(world):
    trigger = _trigger(None)
    trigger.skynomad_conn_id = "no_such_connection"
    event = _first_event(trigger)
    assert event["kind"] == "failed" and "no_such_connection" in event["reason"]


def test_the_first_progress_the_trigger_sees_places_the_checkpoint(world):
    handle = _launch(world)
    trigger = _trigger(handle)

    def state_now(base, elapsed, progress):  # one decision step's state, as the trigger's watch computes it
        _, kwargs = trigger.serialize()
        watch = Watch.from_kwargs(kwargs["job"], 0.0, base.to_dict(), kwargs["group"], 0.2, kwargs["seq"])
        return watch.state_now(elapsed, progress)

    base = JobState(running=Option(ZONE, Mode.SPOT))  # launched before any progress: no checkpoint yet
    assert state_now(base, elapsed=0.1, progress=0.0).checkpoint_market is None
    assert state_now(base, elapsed=0.5, progress=0.3).checkpoint_market == ZONE
    moved = base.advance(checkpoint_market="us-east4-a", progress_hours=1.0)
    assert state_now(moved, elapsed=0.5, progress=1.0).checkpoint_market == "us-east4-a"


def test_an_event_held_back_after_a_deferral_carries_a_decision_made_after_the_hold(world, monkeypatch):
    """The trigger holds its first event back for MIN_EVENT_SECONDS (an Airflow race); on a fast
    clock that spans steps, so it looks again after the hold instead of sending what it saw before."""
    import airflow_provider_skynomad.triggers.skynomad as module

    monkeypatch.setattr(module, "MIN_EVENT_SECONDS", 0.4)
    calls = []

    class Changing(Scripted):
        def decide(self, job, state, view, now):
            calls.append(now)
            zone = "us-east4-a" if len(calls) == 1 else "europe-west1-c"
            return Decision(try_in_order=(Option(zone, Mode.SPOT),), reason="changing")

    monkeypatch.setitem(registry.POLICIES, "scripted", lambda **_: Changing())
    handle = _launch(world)
    world.progress_fraction = 0.1
    world.hours = 1.0
    world.tick_hours = 0.05  # the clock moves with every look
    event = _first_event(_trigger(handle, policy="scripted", elapsed=1.0))
    assert len(calls) >= 2  # looked again after the hold
    assert Decision.from_dict(event["decision"]).try_in_order[0] == Option("europe-west1-c", Mode.SPOT)
    assert event["elapsed_hours"] > calls[0]


def test_a_finished_job_is_reported_no_sooner_than_the_workers_hold(world):
    """The worker's hold (`min_event_seconds`) delays even an event seen at the first look: the
    scheduler must have read the deferring process's exit before the task is resumed."""
    import time

    handle = _launch(world)
    world.status[handle.client_token] = GroupStatus.SUCCEEDED
    trigger = SkyNomadTrigger(**{**_trigger(handle).serialize()[1], "min_event_seconds": 1.5})
    started = time.monotonic()
    assert _first_event(trigger)["kind"] == "finished"
    assert time.monotonic() - started >= 1.5


def test_an_idle_job_is_not_looked_at_again_at_once(world, monkeypatch):
    """The worker has just left the job idle (or its launch was refused): a look at once could only
    propose that launch again and wake the worker in a loop. The first look keeps to the schedule."""
    import time

    import airflow_provider_skynomad.triggers.skynomad as module

    monkeypatch.setattr(module, "MIN_EVENT_SECONDS", 0.0)
    monkeypatch.setitem(registry.POLICIES, "scripted", lambda **_: Scripted("us-east4-a"))
    step_wall = 0.6  # shorter than a 1 h step on the simulated default's clock, so it is the step
    started = time.monotonic()
    event = _first_event(_trigger(None, policy="scripted", step_wall=step_wall, step_hours=1.0))
    assert event["kind"] in ("replan", "deadline_pressure")
    assert time.monotonic() - started >= step_wall / 2  # half a step at least, not at once
    handle = _launch(world)
    started = time.monotonic()
    world.status[handle.client_token] = GroupStatus.SUCCEEDED
    assert _first_event(_trigger(handle, step_wall=step_wall, step_hours=1.0))["kind"] == "finished"
    assert time.monotonic() - started < step_wall / 2  # a job with a group is looked at at once


def test_a_watching_trigger_publishes_where_the_job_stands_without_a_worker(world, monkeypatch):
    """The job page must not wait for a worker slot: every few wall seconds the trigger writes the
    checkpointed progress, slack and spend it sees to the live-status table (jobs/live.py)."""
    from airflow_provider_skynomad.jobs.live import LiveStatusTable
    from airflow_provider_skynomad.market.table import default_market_url

    monkeypatch.setitem(registry.POLICIES, "scripted", lambda **_: Scripted(ZONE))
    handle = _launch(world)
    world.tick_hours, world.progress_fraction = 0.01, 0.5  # time passes; half the work is checkpointed
    base = {"job_id": "sn-live-1", "state": "running", "zone": ZONE, "mode": "spot", "progress_pct": 10.0}
    base |= {"elapsed_hours": 0.0, "deadline_hours": 10.0, "slack_hours": 3.0, "spend_usd": 1.0}
    base |= {"all_on_demand_usd": 80.0, "preemptions": 0, "migrations": 0, "at_hours": 0.0, "usd_per_hour": 2.0}
    trigger = _trigger(handle, policy="scripted")
    trigger.live = base

    async def run_briefly():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(anext(trigger.run()), 1.0)

    asyncio.run(run_briefly())
    table = LiveStatusTable(default_market_url())
    try:
        (status,) = table.read(["sn-live-1"]).values()
    finally:
        table.close()
    assert status["progress_pct"] == 50.0 and status["zone"] == ZONE and status["elapsed_hours"] > 0
    assert status["spend_usd"] == round(1.0 + 2.0 * status["elapsed_hours"], 2)
    assert status["slack_hours"] == round(10.0 - status["elapsed_hours"] - 3.0 - 0.2, 3)  # spot: a cold start to switch
    assert status["all_on_demand_usd"] == 80.0

"""SkyNomadTrigger.on_kill: an ended task's group is terminated; a trigger merely handed to another
triggerer (the task still deferred), a cleared task and an unknown state end nothing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger
from tests.support.fakes import FakeCloud

from .test_trigger import _started, world  # noqa: F401


@pytest.fixture
def cloud(world):  # noqa: F811
    return world


def _trigger(cloud: FakeCloud, map_index: int = -1) -> SkyNomadTrigger:
    """The trigger of a started job whose group (the cloud's first launch) runs."""
    trigger, _ = _started()
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="job", map_index=map_index)
    return trigger


def _token(cloud: FakeCloud) -> str:
    return cloud.launches[0].client_token


def _states(monkeypatch, answer):
    calls = []

    def get_task_states(**kwargs):
        calls.append(kwargs)
        if isinstance(answer, Exception):
            raise answer
        return answer

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(get_task_states))
    return calls


@pytest.mark.parametrize("state", ["failed", "skipped", "success"])  # marked failed, DAG-run timeout, marked success
def test_an_ended_task_has_its_group_terminated(cloud, monkeypatch, state):
    trigger = _trigger(cloud)
    calls = _states(monkeypatch, {"r": {"job": state}})
    asyncio.run(trigger.on_kill())
    assert cloud.terminated == [_token(cloud)]
    assert calls == [{"dag_id": "d", "map_index": -1, "task_ids": ["job"], "run_ids": ["r"]}]


def test_a_mapped_task_is_looked_up_by_its_map_index(cloud, monkeypatch):
    trigger = _trigger(cloud, map_index=2)
    _states(monkeypatch, {"r": {"job_2": "failed", "job_1": "deferred"}})
    asyncio.run(trigger.on_kill())
    assert cloud.terminated == [_token(cloud)]


@pytest.mark.parametrize(
    "answer",
    [
        {"r": {"job": "deferred"}},  # a triggerer that missed its heartbeat lost the trigger to another
        {"r": {"job": None}},  # cleared: the next try reconnects to the group
        {"r": {"job": "up_for_retry"}},
        {},
        RuntimeError("API server unreachable"),
    ],
)
def test_a_task_that_has_not_ended_keeps_its_group(cloud, monkeypatch, answer):
    trigger = _trigger(cloud)
    _states(monkeypatch, answer)
    asyncio.run(trigger.on_kill())
    assert cloud.terminated == []


def test_a_launch_in_flight_is_terminated_too_when_it_exists(cloud, monkeypatch):
    """The controller wrote a relaunch down, sent it, and was cancelled before it recorded the group."""
    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.jobs.record import PendingLaunch
    from airflow_provider_skynomad.jobs.table import JobTable
    from airflow_provider_skynomad.planner.actions import Mode, Option

    trigger = _trigger(cloud)
    request = LaunchRequest("gcp", "us-east4", "us-east4-b", "a3-highgpu-1g", 1, False, f"{trigger.args.job_id}-2")
    cloud.launch(request)
    with JobTable() as jobs:
        stored = jobs.load(trigger.args.job_id)
        stored.record.pending = PendingLaunch(request, Option("us-east4-b", Mode.ON_DEMAND), 1.0)
        jobs.put(stored.record, owner="trigger-test", task_key=trigger.args.task.key)
    _states(monkeypatch, {"r": {"job": "failed"}})
    asyncio.run(trigger.on_kill())
    assert sorted(cloud.terminated) == sorted([_token(cloud), request.client_token])


def test_break_1_an_ended_task_s_trigger_never_ends_another_task_s_job(cloud, monkeypatch):
    """Arguments whose task does not own their job id end nothing, whatever the task's state."""
    victim = _trigger(cloud)
    kwargs = victim.serialize()[1]
    foreign = SkyNomadTrigger(**{**kwargs, "task": {**kwargs["task"], "run_id": "attacker_run"}})
    foreign.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="job", map_index=-1)
    _states(monkeypatch, {"r": {"job": "failed"}})
    asyncio.run(foreign.on_kill())
    assert cloud.terminated == []

"""SkyNomadTrigger.on_kill: an ended task's group is terminated; a trigger merely handed to another
triggerer (the task still deferred), a cleared task and an unknown state end nothing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import LaunchRequest
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

from .fakes import FakeCloud

ZONE = "us-central1-a"


@pytest.fixture
def cloud(skynomad_home, monkeypatch):
    fake = FakeCloud(pd.Timestamp("2025-10-06T00:00:00Z"))
    monkeypatch.setattr("airflow_provider_skynomad.hooks.skynomad.make_cloud", lambda config: fake)
    return fake


def _trigger(cloud: FakeCloud, map_index: int = -1) -> SkyNomadTrigger:
    handle = cloud.launch(LaunchRequest("gcp", "us-central1", ZONE, "a3-highgpu-1g", 1, True, "tok-1", job_id="sn-1"))
    trigger = SkyNomadTrigger(
        job=JobSpec(work_hours=6.0, deadline_hours=10.0).to_dict(),
        job_start_hours=0.0,
        state=JobState().to_dict(),
        group=handle.to_dict(),
        launch_delay_hours=0.2,
        zones=[ZONE],
        instance_types=None,
        policy="skynomad",
        policy_params=None,
        decision_step_hours=1 / 6,
        seq=1,
        skynomad_conn_id="skynomad_default",
    )
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="job", map_index=map_index)
    return trigger


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
    assert cloud.terminated == ["tok-1"]
    assert calls == [{"dag_id": "d", "map_index": -1, "task_ids": ["job"], "run_ids": ["r"]}]


def test_a_mapped_task_is_looked_up_by_its_map_index(cloud, monkeypatch):
    trigger = _trigger(cloud, map_index=2)
    _states(monkeypatch, {"r": {"job_2": "failed", "job_1": "deferred"}})
    asyncio.run(trigger.on_kill())
    assert cloud.terminated == ["tok-1"]


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


def test_the_rescue_the_trigger_launched_is_terminated_too(cloud, monkeypatch):
    trigger = _trigger(cloud)
    rescue = cloud.launch(LaunchRequest("gcp", "us-east4", "us-east4-a", "a3-highgpu-1g", 1, False, "tok-2"))
    trigger._rescue_handle = rescue.to_dict()
    _states(monkeypatch, {"r": {"job": "failed"}})
    asyncio.run(trigger.on_kill())
    assert sorted(cloud.terminated) == ["tok-1", "tok-2"]

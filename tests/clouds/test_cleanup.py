"""skynomad cleanup: what jobs that no longer run left behind is ended; live jobs keep everything."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import Cloud, GroupHandle, GroupStatus, LaunchRequest, Resource
from airflow_provider_skynomad.clouds.cleanup import is_live, plan_cleanup
from airflow_provider_skynomad.clouds.cleanup_commands import _duration, cleanup, jobs_from_task_api
from airflow_provider_skynomad.jobs.record import job_id_for

NOW = pd.Timestamp("2025-10-08T12:00:00Z")


def _r(kind, job, rid=None, **tags):
    return Resource("gcp", kind, rid or f"{kind}-{job or 'probe'}", "us-east4", "us-east4-a", job, tags=tags)


def _plan(resources, live=(), ended=None, unknown=(), retention=timedelta(days=7)):
    plan = plan_cleanup(
        resources, set(live), ended=ended, unknown=set(unknown), now=NOW, checkpoint_retention=retention
    )
    return {r.resource.id for r in plan.release}, {r.resource.id: r.reason for r in plan.keep}


def test_a_live_job_keeps_everything_and_an_ended_one_loses_its_instances_at_once():
    resources = [_r("instance", "live"), _r("checkpoint", "live"), _r("instance", "gone"), _r("spot_request", "gone")]
    released, kept = _plan(resources, live={"live"}, ended={"gone": NOW - pd.Timedelta(minutes=5)})
    assert released == {"instance-gone", "spot_request-gone"}
    assert set(kept) == {"instance-live", "checkpoint-live"}


def test_checkpoints_are_kept_for_the_retention_then_deleted():
    resources = [_r("checkpoint", "recent"), _r("checkpoint", "old"), _r("checkpoint", "when")]
    ended = {"recent": NOW - pd.Timedelta(days=2), "old": NOW - pd.Timedelta(days=8), "when": None}
    released, kept = _plan(resources, ended=ended)
    assert released == {"checkpoint-old"}
    assert "kept until 2025-10-13" in kept["checkpoint-recent"] and "unknown" in kept["checkpoint-when"]
    released, _ = _plan(resources, ended=ended, retention=timedelta(days=1))
    assert released == {"checkpoint-old", "checkpoint-recent"}


def test_a_job_that_cannot_be_told_keeps_everything_and_a_probes_leftover_is_ended():
    released, kept = _plan([_r("instance", "mystery"), _r("instance", "")], unknown={"mystery"})
    assert released == {"instance-probe"} and "cannot tell" in kept["instance-mystery"]
    plan = plan_cleanup([_r("instance", "")], set(), now=NOW, probe_leftovers=False)  # the DAG's task
    assert plan.release == () and "in flight" in plan.keep[0].reason


@pytest.mark.parametrize(
    ("state", "live"),
    [
        ("running", True),
        ("deferred", True),
        ("up_for_retry", True),
        (None, True),
        ("success", False),
        ("failed", False),
    ],
)
def test_live_states(state, live):
    assert is_live(state) is live


def test_the_task_api_lookup_reads_the_states_of_the_tasks_the_tags_name(monkeypatch):
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    tags = {"skynomad-dag": "d", "skynomad-run": "r", "skynomad-task": "t"}
    running, failed = job_id_for("d", "r", "t", 0, "c"), job_id_for("d", "r", "t", 1, "a")
    gone = job_id_for("d", "r", "t", 7, "a")
    before_a_clear = job_id_for("d", "r", "t", 0, "a")  # the same task instance's job before it was cleared
    resources = [
        _r("checkpoint", before_a_clear, **tags),  # kept while its task instance runs again
        _r("instance", running, **tags),
        _r("instance", failed, **tags),
        _r("instance", gone, **tags),  # no such task instance: nothing of it can run
        _r("instance", "sn-untagged"),
    ]
    calls = []

    def states(**kwargs):
        calls.append(kwargs)
        return {"r": {"t_0": "deferred", "t_1": "failed"}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(states))
    live, ended, unknown = jobs_from_task_api(resources)
    assert live == {running, before_a_clear} and set(ended) == {failed, gone} and unknown == {"sn-untagged"}
    assert calls == [{"dag_id": "d", "task_ids": ["t"], "run_ids": ["r"]}]


class ListingCloud(Cloud):
    """Only what cleanup uses: resources() and release()."""

    name = "fake"

    def __init__(self, resources, broken=()):
        self.listed, self.released, self.broken = list(resources), [], set(broken)

    def resources(self, tags=None):
        return list(self.listed)

    def release(self, resource):
        if resource.id in self.broken:
            raise RuntimeError("API error")
        self.released.append(resource.id)

    def now_timestamp(self):
        return NOW

    find = launch = poll = terminate = progress = probe = copy_checkpoint = None


def test_cleanup_says_what_it_ends_and_a_dry_run_ends_nothing():
    resources = [_r("instance", "gone"), _r("instance", "live"), _r("instance", "bad", rid="i-bad")]
    cloud = ListingCloud(resources, broken={"i-bad"})
    lookup = lambda resources: ({"live"}, {"gone": None, "bad": None}, set())  # noqa: E731
    said = []
    cleanup(cloud, lookup, dry_run=True, say=said.append)
    assert cloud.released == []
    assert "would end gcp instance instance-gone in us-east4-a: job gone no longer runs" in said
    said.clear()
    _, failures = cleanup(cloud, lookup, say=said.append)
    assert cloud.released == ["instance-gone"] and list(failures) == ["i-bad"]
    assert said[-1] == "ended 1 instance; 1 could not be ended; kept 1 resource(s) of jobs that run or may resume"


def test_retention_is_counted_on_airflow_s_clock_not_the_simulated_cloud_s():
    """Task end times come from Airflow (the wall clock); the simulated cloud's clock is in 2025, so
    against it every checkpoint "ended 0 min ago" and was kept for ever."""
    ended_at = pd.Timestamp.now(tz="UTC") - pd.Timedelta(days=8)
    cloud = ListingCloud([_r("checkpoint", "old")])  # its clock: NOW, in 2025
    plan, _ = cleanup(cloud, lambda resources: (set(), {"old": ended_at}, set()), say=lambda words: None)
    assert [r.resource.job_id for r in plan.release] == ["old"]


def test_older_than_parses_durations():
    assert _duration("7d") == timedelta(days=7) and _duration("30m") == timedelta(minutes=30)
    with pytest.raises(argparse.ArgumentTypeError):
        _duration("soon")


def test_the_simulated_cloud_s_leftover_group_is_ended_and_a_live_one_kept(tmp_path, monkeypatch):
    from airflow_provider_skynomad.clouds.simulated import SimulatedCloud
    from airflow_provider_skynomad.hooks.skynomad import bundled_trace

    monkeypatch.setenv("SKYNOMAD_COLD_START_HOURS", "0")
    cloud = SimulatedCloud(bundled_trace(), tmp_path / "cloud", speed=60.0, trace_start=60.0)
    sleeper = (sys.executable, "-c", "import time; time.sleep(120)")
    tags = {"skynomad-dag": "d", "skynomad-run": "r", "skynomad-task": "t"}
    handles = {}
    for index, zone in enumerate(["us-central1-a", "us-east4-a"]):
        job = job_id_for("d", "r", "t", index, "a")
        request = LaunchRequest(
            "gcp", zone.rsplit("-", 1)[0], zone, "a3-highgpu-1g", 1, False, f"tok-{index}",
            command=sleeper, tags={**tags, "skynomad-job": job}, job_id=job,
        )  # fmt: skip
        handles[job] = cloud.launch(request)
    live_job, ended_job = sorted(handles, key=lambda j: handles[j].zone)
    try:
        lookup = lambda resources: ({live_job}, {ended_job: None}, set())  # noqa: E731
        plan, failures = cleanup(cloud, lookup, say=lambda words: None)
        assert not failures
        assert {r.resource.job_id for r in plan.release if r.resource.kind == "instance"} == {ended_job}
        assert cloud.poll(handles[ended_job]) is GroupStatus.TERMINATED
        assert cloud.poll(handles[live_job]) in (GroupStatus.STARTING, GroupStatus.RUNNING)
    finally:
        for handle in handles.values():
            cloud.terminate(GroupHandle.from_dict(handle.to_dict()))

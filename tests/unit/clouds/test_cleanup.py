"""skynomad cleanup: only this deployment's resources of provably ended jobs, and probes' leftovers, end."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

import pandas as pd
import pytest

from airflow_provider_skynomad.cli.cleanup import _duration
from airflow_provider_skynomad.clouds.base import Cloud, GroupHandle, GroupStatus, LaunchRequest, Resource
from airflow_provider_skynomad.clouds.cleanup import JobFact, is_live, plan_cleanup
from airflow_provider_skynomad.clouds.cleanup_run import cleanup, jobs_from_task_api
from airflow_provider_skynomad.jobs.record import job_id_for

NOW = pd.Timestamp("2025-10-08T12:00:00Z")
OURS = "prod"


def _r(kind, job, rid=None, deployment=OURS, **tags):
    tags = {"skynomad-deployment": deployment, **tags} if deployment else tags
    return Resource("gcp", kind, rid or f"{kind}-{job or 'probe'}", "us-east4", "us-east4-a", job, tags=tags)


def _plan(resources, jobs, retention=timedelta(days=7), grace=timedelta(minutes=10)):
    plan = plan_cleanup(resources, jobs, deployment=OURS, now=NOW, checkpoint_retention=retention, grace=grace)
    return {r.resource.id for r in plan.release}, {r.resource.id: r.reason for r in plan.keep}


def test_a_live_job_keeps_everything_and_an_ended_one_loses_its_instances_after_the_grace():
    resources = [_r("instance", "live"), _r("checkpoint", "live"), _r("instance", "gone"), _r("spot_request", "gone")]
    resources.append(_r("instance", "just"))
    jobs = {
        "live": JobFact.live(),
        "gone": JobFact.ended(NOW - pd.Timedelta(hours=1)),
        "just": JobFact.ended(NOW - pd.Timedelta(minutes=5)),
    }
    released, kept = _plan(resources, jobs)
    assert released == {"instance-gone", "spot_request-gone"}
    assert set(kept) == {"instance-live", "checkpoint-live", "instance-just"}
    assert "grace" in kept["instance-just"]


def test_checkpoints_are_kept_for_the_retention_then_deleted():
    resources = [_r("checkpoint", "recent"), _r("checkpoint", "old"), _r("checkpoint", "when")]
    jobs = {
        "recent": JobFact.ended(NOW - pd.Timedelta(days=2)),
        "old": JobFact.ended(NOW - pd.Timedelta(days=8)),
        "when": JobFact.ended(None),
    }
    released, kept = _plan(resources, jobs)
    assert released == {"checkpoint-old"}
    assert "kept until 2025-10-13" in kept["checkpoint-recent"] and "unknown" in kept["checkpoint-when"]
    released, _ = _plan(resources, jobs, retention=timedelta(days=1))
    assert released == {"checkpoint-old", "checkpoint-recent"}


def test_only_proof_ends_a_resource():
    """Unknown jobs, other deployments, untagged and non-probe purposes are kept, each saying why."""
    ended = JobFact.ended(NOW - pd.Timedelta(days=30))
    resources = [
        _r("instance", "mystery"),  # Airflow was not asked / has no such task instance
        _r("instance", "theirs", deployment="staging"),  # ended by our Airflow's record, but not ours
        _r("instance", "old", deployment=None),  # launched before deployment ids
        _r("instance", "", rid="web", **{"skynomad:purpose": "web"}),
        _r("instance", "", rid="Probe", **{"skynomad:purpose": "Probe"}),
        _r("instance", "", rid="probe-gcp", **{"skynomad-purpose": "probe"}),
        _r("instance", "", rid="probe-aws", **{"skynomad:purpose": "probe"}),
        _r("instance", "", rid="probe-theirs", deployment="staging", **{"skynomad:purpose": "probe"}),
    ]
    jobs = {"mystery": JobFact.unknown("Airflow has no task instance d/r/t"), "theirs": ended, "old": ended}
    released, kept = _plan(resources, jobs)
    assert released == {"probe-gcp", "probe-aws"}
    assert "unknown" in kept["instance-mystery"] and "Airflow has no task instance" in kept["instance-mystery"]
    assert "deployment 'staging'" in kept["instance-theirs"] and "no skynomad-deployment" in kept["instance-old"]
    assert "purpose=web" in kept["web"] and "purpose=Probe" in kept["Probe"]
    plan = plan_cleanup([_r("instance", "", **{"skynomad:purpose": "probe"})], {}, deployment=OURS, now=NOW,
                        probe_leftovers=False)  # fmt: skip
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


def _fake_task_api(monkeypatch, states_by_run, run_ends=None):
    """The API server as the probe DAG's task sees it: states only for the exact ids asked about."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from airflow_provider_skynomad.clouds import cleanup_run

    calls = []

    def states(**kwargs):
        calls.append(kwargs)
        return {run: found for run, found in states_by_run.items() if run in kwargs["run_ids"]}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(states))
    monkeypatch.setattr(cleanup_run, "dag_run_end", lambda dag_id, run_id: (run_ends or {}).get(run_id))
    return calls


def test_the_task_api_lookup_reads_the_states_of_the_tasks_the_tags_name(monkeypatch):
    tags = {"skynomad-dag": "d", "skynomad-run": "r", "skynomad-task": "t"}
    running, failed = job_id_for("d", "r", "t", 0, "c"), job_id_for("d", "r", "t", 1, "a")
    gone = job_id_for("d", "r", "t", 7, "a")
    before_a_clear = job_id_for("d", "r", "t", 0, "a")  # the same task instance's job before it was cleared
    lying = job_id_for("d", "r", "other", 1, "a")  # its tags name d/r/t, its id another task
    resources = [
        _r("checkpoint", before_a_clear, **tags),  # kept while its task instance runs again
        _r("instance", running, **tags),
        _r("instance", failed, **tags),
        _r("instance", gone, **tags),
        _r("instance", lying, **tags),
        _r("instance", "sn-untagged"),
    ]
    ended_at = NOW - pd.Timedelta(hours=2)
    calls = _fake_task_api(monkeypatch, {"r": {"t_0": "deferred", "t_1": "failed"}}, {"r": ended_at})
    facts = jobs_from_task_api(resources)
    assert {j for j, f in facts.items() if f.status == "live"} == {running, before_a_clear}
    assert facts[failed] == JobFact.ended(ended_at, facts[failed].why) and "DAG run ended" in facts[failed].why
    assert facts[gone].status == "unknown" and "no task instance d/r/t" in facts[gone].why  # not "ended"
    assert facts[lying].status == "unknown" and facts["sn-untagged"].status == "unknown"
    assert calls == [{"dag_id": "d", "task_ids": ["t"], "run_ids": ["r"]}]


def test_without_a_run_end_the_task_api_cannot_prove_when_a_job_ended(monkeypatch):
    job = job_id_for("d", "r", "t", -1, "a")
    _fake_task_api(monkeypatch, {"r": {"t": "success"}})
    fact = jobs_from_task_api([_r("instance", job, **{"skynomad-dag": "d", "skynomad-run": "r", "skynomad-task": "t"})])
    assert fact[job].status == "ended" and fact[job].ended_at is None  # the plan keeps it as unknown


class ListingCloud(Cloud):
    """Only what cleanup uses: resources() and release()."""

    name = "fake"
    deployment_id = OURS

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
    an_hour_ago = pd.Timestamp.now(tz="UTC") - pd.Timedelta(hours=1)
    facts = {"live": JobFact.live("task instance d/r/t is running"), "gone": JobFact.ended(an_hour_ago, "d/r/t failed")}
    lookup = lambda resources: {**facts, "bad": facts["gone"]}  # noqa: E731
    said = []
    cleanup(cloud, lookup, dry_run=True, say=said.append)
    assert cloud.released == []
    assert said[0].startswith("fake: this deployment is 'prod'")
    assert "would end gcp instance instance-gone in us-east4-a: job gone ended 1 h ago (d/r/t failed)" in said
    assert "kept gcp instance instance-live in us-east4-a: job live still runs (task instance d/r/t is running)" in said
    said.clear()
    _, failures = cleanup(cloud, lookup, say=said.append)
    assert cloud.released == ["instance-gone"] and list(failures) == ["i-bad"]
    assert said[-1].startswith("ended 1 instance; 1 could not be ended; kept 1 resource(s)")


def test_retention_is_counted_on_airflow_s_clock_not_the_simulated_cloud_s():
    """Task end times come from Airflow (the wall clock); the simulated cloud's clock is in 2025, so
    against it every checkpoint "ended 0 min ago" and was kept for ever."""
    ended_at = pd.Timestamp.now(tz="UTC") - pd.Timedelta(days=8)
    cloud = ListingCloud([_r("checkpoint", "old")])  # its clock: NOW, in 2025
    plan, _ = cleanup(cloud, lambda resources: {"old": JobFact.ended(ended_at)}, say=lambda words: None)
    assert [r.resource.job_id for r in plan.release] == ["old"]


def test_older_than_parses_durations():
    assert _duration("7d") == timedelta(days=7) and _duration("30m") == timedelta(minutes=30)
    with pytest.raises(argparse.ArgumentTypeError):
        _duration("soon")


def test_the_simulated_cloud_s_leftover_group_is_ended_and_a_live_one_kept(tmp_path, monkeypatch):
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
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
        ended_at = pd.Timestamp.now(tz="UTC") - pd.Timedelta(hours=1)
        lookup = lambda resources: {live_job: JobFact.live(), ended_job: JobFact.ended(ended_at)}  # noqa: E731
        plan, failures = cleanup(cloud, lookup, say=lambda words: None)
        assert not failures
        assert {r.resource.job_id for r in plan.release if r.resource.kind == "instance"} == {ended_job}
        assert cloud.poll(handles[ended_job]) is GroupStatus.TERMINATED
        assert cloud.poll(handles[live_job]) in (GroupStatus.STARTING, GroupStatus.RUNNING)
    finally:
        for handle in handles.values():
            cloud.terminate(GroupHandle.from_dict(handle.to_dict()))

"""The red-team breaks of issue 25 in `skynomad cleanup`, as they were reproduced.

These tests import only what the cleanup had before the fix (the command, its two lookups, the
clouds), so they run, and fail, against that code too.
"""

from __future__ import annotations

import contextlib

import boto3
import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import LaunchRequest
from airflow_provider_skynomad.clouds.cleanup_run import cleanup, jobs_from_metadata_db, jobs_from_task_api
from airflow_provider_skynomad.jobs.record import job_id_for
from tests.support.aws_fixtures import SIGNING_SECRET


def fake_task_api(monkeypatch, states_by_run):
    """The API server as the probe DAG's task sees it: states only for the exact run ids asked about."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from airflow_provider_skynomad.clouds import cleanup_run

    def states(**kwargs):
        return {run: found for run, found in states_by_run.items() if run in kwargs["run_ids"]}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(states))
    monkeypatch.setattr(cleanup_run, "dag_run_end", lambda dag_id, run_id: None, raising=False)


def test_break_1_the_probe_dag_keeps_a_running_gcp_job_whose_run_id_labels_mangle(monkeypatch):
    """GCP labels lowercase the run id and replace ':' '+' '.': the cleanup asked Airflow about a run
    that does not exist, took "no such task instance" for ended and deleted the running job."""
    from airflow_provider_skynomad.clouds.gcp.cloud import GcpCloud
    from tests.support.gcp_fakes import FakeCompute, FakeGceHook

    run_id = "manual__2026-12-03T08:00:00.123456+00:00"
    dag_id, task_id = "skynomad_fine_tune", "Train.Model"
    job = job_id_for(dag_id, run_id, task_id, -1, "0192f0c4-aaaa-7bbb-8ccc-123456789abc")
    tags = {"skynomad-job": job, "skynomad-dag": dag_id, "skynomad-run": run_id, "skynomad-task": task_id}
    compute = FakeCompute()
    compute.templates.add("gpu")
    cloud = GcpCloud(
        project_id="proj",
        hook=FakeGceHook(compute),
        source_instance_template="gpu",
        checkpoint_signing_secret=SIGNING_SECRET,
    )
    request = LaunchRequest("gcp", "us-central1", "us-central1-a", "a3-highgpu-1g", 1, True, "sn-tok", tags=tags)
    cloud.launch(LaunchRequest(**{**request.to_dict(), "command": (), "job_id": job}))
    fake_task_api(monkeypatch, {run_id: {task_id: "running"}})  # Airflow knows only the exact run id
    said = []
    plan, _ = cleanup(cloud, jobs_from_task_api, dry_run=True, probe_leftovers=False, say=said.append)
    assert not [line for line in said if line.startswith("would end gcp")], said
    assert [r.resource.id for r in plan.keep] == ["sn-tok-0"]
    assert f"job {job} still runs" in plan.keep[0].reason
    # A run id Airflow does not know is unknown, not ended: the same instance is still kept.
    fake_task_api(monkeypatch, {})
    plan, _ = cleanup(cloud, jobs_from_task_api, dry_run=True, probe_leftovers=False, say=lambda words: None)
    assert plan.release == () and "unknown" in plan.keep[0].reason


# -- break 2: the command on a shared AWS account --------------------------------------------------


@pytest.fixture
def metadata_db(monkeypatch, tmp_path):
    """Airflow's task_instance table as `jobs_from_metadata_db` reads it, in SQLite; returns add(...)."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE task_instance (dag_id TEXT, run_id TEXT, task_id TEXT, map_index INTEGER, "
            "state TEXT, end_date DATETIME)"
        )

    @contextlib.contextmanager
    def create_session():
        with Session(engine) as session:
            yield session

    import airflow.utils.session

    monkeypatch.setattr(airflow.utils.session, "create_session", create_session)

    def add(dag_id, run_id, task_id, map_index, state, end=None):
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO task_instance VALUES (?, ?, ?, ?, ?, ?)",
                (dag_id, run_id, task_id, map_index, state, None if end is None else f"{end:%Y-%m-%d %H:%M:%S.%f}"),
            )

    yield add
    engine.dispose()


@pytest.fixture
def aws(monkeypatch):
    moto = pytest.importorskip("moto")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "t")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", "aws://")
    with moto.mock_aws():
        from tests.support.aws_fixtures import account

        yield account({"us-east-1": ["us-east-1a"]})


def _instance(acct, tags: dict[str, str]) -> str:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    made = ec2.run_instances(
        ImageId=acct.images["us-east-1"], InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        SubnetId=acct.subnets["us-east-1a"], TagSpecifications=spec,
    )  # fmt: skip
    return made["Instances"][0]["InstanceId"]


def test_break_2_the_command_ends_only_what_it_proves_ended(aws, metadata_db):
    """`jobs_from_metadata_db` reported nothing unknown, so the command ended another Airflow's live
    job, an instance with a job id but no DAG tags and one tagged only purpose=web; and it never
    deleted an ended job's checkpoints (their end time was looked up from tags S3 has not)."""
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from tests.support.aws_fixtures import BUCKET, put_checkpoint

    cloud = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, **aws.cloud_options())
    now = pd.Timestamp.now(tz="UTC")
    dag, run = "skynomad_fine_tune", "scheduled__2026-12-03T08:00:00+00:00"
    ended = job_id_for(dag, run, "train", -1, "a")
    tags = {"skynomad-job": ended, "skynomad-dag": dag, "skynomad-run": run, "skynomad-task": "train"}
    request = LaunchRequest("aws", "us-east-1", "us-east-1a", "g4dn.xlarge", 1, False, "tok-ended", tags=tags)
    cloud.launch(LaunchRequest(**{**request.to_dict(), "job_id": ended}))
    put_checkpoint(boto3.client("s3"), BUCKET.format(region="us-east-1"), ended, 1, {"model.pkl": b"m"})
    metadata_db(dag, run, "train", -1, "success", now - pd.Timedelta(days=2))
    # A job that ended cleanly: its instances are gone, only its checkpoints are left.
    finished = job_id_for(dag, run, "evaluate", 3, "a")
    tags = {**tags, "skynomad-job": finished, "skynomad-task": "evaluate"}
    request = LaunchRequest("aws", "us-east-1", "us-east-1a", "g4dn.xlarge", 1, False, "tok-finished", tags=tags)
    cloud.terminate(cloud.launch(LaunchRequest(**{**request.to_dict(), "job_id": finished})))
    put_checkpoint(boto3.client("s3"), BUCKET.format(region="us-east-1"), finished, 4, {"model.pkl": b"m"})
    metadata_db(dag, run, "evaluate", 3, "failed", now - pd.Timedelta(days=3))
    # Another Airflow's live job: its task instance is not in this metadata database.
    theirs = job_id_for("their_dag", "manual__x", "train", -1, "b")
    other = _instance(aws, {"skynomad-job": theirs, "skynomad-dag": "their_dag", "skynomad-run": "manual__x",
                            "skynomad-task": "train", "skynomad-deployment": "staging"})  # fmt: skip
    no_dag_tags = _instance(aws, {"skynomad-job": job_id_for("d", "r", "t", -1, "c")})
    web = _instance(aws, {"skynomad:purpose": "web"})

    said = []
    cleanup(cloud, jobs_from_metadata_db, dry_run=True, say=said.append, checkpoint_retention=pd.Timedelta(days=1))
    to_end = [line for line in said if line.startswith("would end aws")]
    for kept in (other, no_dag_tags, web):
        assert not [line for line in to_end if kept in line], to_end
        assert [line for line in said if line.startswith(f"kept aws instance {kept}")], said
    assert [line for line in to_end if "checkpoint" in line and ended in line], said
    assert [line for line in to_end if "checkpoint" in line and finished in line], said
    assert [line for line in to_end if "instance" in line and ended in line], said


# -- the "must show": a dry run on a shared account -----------------------------------------


def shared_account(acct, add_task_instance, now) -> dict[str, list[str]]:
    """What a shared AWS account holds; returns the ids (and job ids) of each kind of resource.

    This deployment ("prod"): a live job, an ended job (instance and checkpoint still there) and a
    probe's leftover; another deployment ("staging"): a live job of the same DAG, run and task as
    prod's ended one (its job id differs only in the try), and a probe's leftover; an instance with
    no tags; one with a job id but no DAG tags; one tagged only ``skynomad:purpose=web``.
    """
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from tests.support.aws_fixtures import BUCKET, put_checkpoint

    s3, bucket = boto3.client("s3", region_name="us-east-1"), BUCKET.format(region="us-east-1")
    dag, run = "skynomad_fine_tune", "scheduled__2026-12-03T08:00:00+00:00"
    ids: dict[str, list[str]] = {}

    def job(cloud, task_id: str, try_id: str, token: str) -> str:
        job_id = job_id_for(dag, run, task_id, -1, try_id)
        tags = {"skynomad-job": job_id, "skynomad-dag": dag, "skynomad-run": run, "skynomad-task": task_id}
        request = LaunchRequest("aws", "us-east-1", "us-east-1a", "g4dn.xlarge", 1, True, token, tags=tags)
        handle = cloud.launch(LaunchRequest(**{**request.to_dict(), "job_id": job_id}))
        put_checkpoint(s3, bucket, job_id, 1, {"model.pkl": b"m"})
        ids[token] = [job_id, *handle.instance_ids]
        return job_id

    prod = AwsCloud(
        checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, deployment_id="prod", **acct.cloud_options()
    )
    staging = AwsCloud(
        checkpoint_signing_secret=SIGNING_SECRET,
        checkpoint_bucket=BUCKET,
        deployment_id="staging",
        **acct.cloud_options(),
    )
    job(prod, "train", "a", "prod-live")
    add_task_instance(dag, run, "train", -1, "deferred")
    job(prod, "evaluate", "a", "prod-ended")
    add_task_instance(dag, run, "evaluate", -1, "failed", now - pd.Timedelta(days=8))
    job(staging, "evaluate", "b", "staging-live")  # prod's metadata database says this task ended
    for name, cloud in (("prod-probe", prod), ("staging-probe", staging)):
        ids[name] = [_instance(acct, {"skynomad:purpose": "probe", "skynomad-deployment": cloud.deployment_id})]
    ids["untagged"] = [_instance(acct, {})]
    ids["no-dag-tags"] = [_instance(acct, {"skynomad-job": job_id_for("d", "r", "t", -1, "c")})]
    ids["prod-no-dag-tags"] = [
        _instance(acct, {"skynomad-job": job_id_for("d", "r", "t", -1, "d"), "skynomad-deployment": "prod"})
    ]
    ids["web"] = [_instance(acct, {"skynomad:purpose": "web", "skynomad-deployment": "prod"})]
    return ids


def test_a_dry_run_on_a_shared_account_lists_only_the_ended_job_and_the_probe_leftover(aws, metadata_db):
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from tests.support.aws_fixtures import BUCKET

    ids = shared_account(aws, metadata_db, pd.Timestamp.now(tz="UTC"))
    cloud = AwsCloud(
        checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, deployment_id="prod", **aws.cloud_options()
    )
    said = []
    plan, _ = cleanup(cloud, jobs_from_metadata_db, dry_run=True, say=said.append)
    ended_job, ended_instance = ids["prod-ended"]
    to_end = {(r.resource.kind, r.resource.job_id or r.resource.id) for r in plan.release}
    spot_requests = (
        {("spot_request", ended_job)} if any(r.resource.kind == "spot_request" for r in plan.release) else set()
    )
    assert (
        to_end
        == {("instance", ended_job), ("checkpoint", ended_job), ("instance", ids["prod-probe"][0])} | spot_requests
    )
    assert [r.resource.id for r in plan.release if r.resource.kind == "instance" and r.resource.job_id] == [
        ended_instance
    ]
    listed_to_end = [line for line in said if line.startswith("would end aws")]
    assert len(listed_to_end) == len(plan.release)
    kept = {r.resource.id: r.reason for r in plan.keep}
    assert (
        "deployment 'staging'" in kept[ids["staging-live"][1]]
        and "deployment 'staging'" in kept[ids["staging-probe"][0]]
    )
    assert "still runs" in kept[ids["prod-live"][1]]
    assert "no skynomad-deployment tag" in kept[ids["no-dag-tags"][0]]
    assert "purpose=web" in kept[ids["web"][0]]
    assert "unknown" in kept[ids["prod-no-dag-tags"][0]] and "do not name its DAG" in kept[ids["prod-no-dag-tags"][0]]
    assert ids["untagged"][0] not in kept  # nothing of SkyNomad's: not even listed
    for line in said[1:-1]:  # every resource is listed with its reason
        assert line.startswith(("would end aws", "kept aws")) and ": " in line, line

"""AwsCloud on moto's EC2 and S3 (moto has no p3 types, no interruptions: those are set by hand)."""

from __future__ import annotations

import boto3
import pytest

moto = pytest.importorskip("moto")

from airflow_provider_skynomad.clouds.aws import AwsCloud  # noqa: E402
from airflow_provider_skynomad.clouds.base import CapacityError, GroupStatus, LaunchRequest  # noqa: E402

REGION, ZONE = "us-east-1", "us-east-1a"


@pytest.fixture
def aws(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_SECURITY_TOKEN": "testing",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", "aws://")
    with moto.mock_aws():
        image = boto3.client("ec2", region_name=REGION).describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        yield AwsCloud(aws_conn_id="aws_default", image_id=image)


def request(token="sn-1", spot=True, count=2, zone=ZONE, job_id="sn", region=REGION):
    return LaunchRequest(
        "aws",
        region,
        zone,
        "g4dn.xlarge",
        count,
        spot,
        token,
        command=("python", "-m", "train"),
        tags={"skynomad-job": "sn"},
        job_id=job_id,
    )


def test_launch_is_tagged_and_idempotent_on_the_client_token(aws):
    first = aws.launch(request())
    again = aws.launch(request())
    assert again.instance_ids == first.instance_ids and len(first.instance_ids) == 2
    client = boto3.client("ec2", region_name=REGION)
    described = client.describe_instances(InstanceIds=list(first.instance_ids))["Reservations"]
    instances = [i for r in described for i in r["Instances"]]
    tags = {t["Key"]: t["Value"] for t in instances[0]["Tags"]}
    assert tags["skynomad-job"] == "sn" and tags["skynomad:client-token"] == "sn-1"
    assert all(i["Placement"]["AvailabilityZone"] == ZONE for i in instances)
    assert aws.poll(first) in (GroupStatus.RUNNING, GroupStatus.STARTING)


def test_terminate_then_poll(aws):
    handle = aws.launch(request(spot=False, count=1))
    aws.terminate(handle)
    aws.terminate(handle)  # twice is fine
    assert aws.poll(handle) in (GroupStatus.TERMINATED, GroupStatus.FAILED)


def test_capacity_error_is_mapped(aws, monkeypatch):
    from botocore.exceptions import ClientError

    def full(**kwargs):
        raise ClientError({"Error": {"Code": "InsufficientInstanceCapacity", "Message": "no"}}, "RunInstances")

    monkeypatch.setattr(aws.ec2(REGION), "run_instances", full)
    with pytest.raises(CapacityError, match="InsufficientInstanceCapacity"):
        aws.launch(request(token="sn-2"))


def test_spot_interruption_is_a_preemption(aws, monkeypatch):
    handle = aws.launch(request(count=1))
    real = aws.ec2(REGION).describe_instances

    def interrupted(**kwargs):
        out = real(**kwargs)
        for r in out["Reservations"]:
            for i in r["Instances"]:
                i["State"] = {"Name": "terminated"}
                i["StateReason"] = {"Code": "Server.SpotInstanceTermination"}
        return out

    monkeypatch.setattr(aws.ec2(REGION), "describe_instances", interrupted)
    assert aws.poll(handle) is GroupStatus.PREEMPTED


def test_probe_releases_what_it_got(aws):
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 3, tags={"skynomad-job": "sn-1"})
    assert 1 <= result.available <= 3  # EC2 grants up to MaxCount; moto grants MinCount
    client = boto3.client("ec2", region_name=REGION)
    instances = [i for r in client.describe_instances()["Reservations"] for i in r["Instances"]]
    assert instances and all(i["State"]["Name"] in ("shutting-down", "terminated") for i in instances)
    # Tagged with the job that probed, so the probe's cost is allocated to it.
    tags = [{t["Key"]: t["Value"] for t in i.get("Tags", [])} for i in instances]
    assert all(t == {"skynomad-job": "sn-1", "skynomad:purpose": "probe"} for t in tags)


def test_checkpoint_copy_between_regional_buckets(aws):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="ckpt-us-east-1")
    s3.create_bucket(Bucket="ckpt-us-west-2", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="ckpt-us-east-1", Key="skynomad/sn/progress.json", Body=b'{"step": 3, "total_steps": 4}')
    aws.checkpoint_bucket = "ckpt-{region}"
    aws.copy_checkpoint("us-east-1a", "us-west-2b", 1.0, job_id="sn")
    body = s3.get_object(Bucket="ckpt-us-west-2", Key="skynomad/sn/progress.json")["Body"].read()
    assert body == b'{"step": 3, "total_steps": 4}'
    handle = aws.launch(request(count=1))
    assert aws.progress(handle) == pytest.approx(0.75)


def test_checkpoints_and_progress_are_kept_per_job(aws):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="ckpt-us-east-1")
    s3.create_bucket(Bucket="ckpt-us-west-2", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    aws.checkpoint_bucket = "ckpt-{region}"
    s3.put_object(Bucket="ckpt-us-east-1", Key="skynomad/job-a/progress.json", Body=b'{"step": 1, "total_steps": 4}')
    s3.put_object(Bucket="ckpt-us-east-1", Key="skynomad/job-a/weights.bin", Body=b"A")
    s3.put_object(Bucket="ckpt-us-east-1", Key="skynomad/job-b/progress.json", Body=b'{"step": 3, "total_steps": 4}')
    a = aws.launch(request("a-1", count=1, job_id="job-a"))
    b = aws.launch(request("b-1", count=1, job_id="job-b"))
    c = aws.launch(request("c-1", count=1, job_id="job-c"))
    assert (aws.progress(a), aws.progress(b), aws.progress(c)) == (0.25, 0.75, None)

    assert aws.copy_checkpoint("us-east-1a", "us-west-2b", 5.0, job_id="job-a") is True
    copied = s3.list_objects_v2(Bucket="ckpt-us-west-2").get("Contents", [])
    assert sorted(o["Key"] for o in copied) == ["skynomad/job-a/progress.json", "skynomad/job-a/weights.bin"]
    assert aws.copy_checkpoint("us-east-1a", "us-west-2b", 5.0, job_id="job-c") is False  # it has none
    assert aws.copy_checkpoint("us-east-1a", "us-east-1b", 5.0, job_id="job-a") is False  # one bucket per region
    assert len(s3.list_objects_v2(Bucket="ckpt-us-west-2")["Contents"]) == 2  # job B's never moved


def test_workload_is_told_its_job_and_checkpoint_place(aws):
    import base64

    aws.checkpoint_bucket = "ckpt-{region}"
    handle = aws.launch(request(count=1, job_id="job-a"))
    client = boto3.client("ec2", region_name=REGION)
    data = client.describe_instance_attribute(InstanceId=handle.instance_ids[0], Attribute="userData")
    script = base64.b64decode(data["UserData"]["Value"]).decode()
    assert "export SKYNOMAD_JOB_ID=job-a\n" in script
    assert "export SKYNOMAD_CHECKPOINT_URI=s3://ckpt-us-east-1/skynomad/job-a/\n" in script


def test_find_returns_the_launch_of_a_token_without_launching(aws):
    assert {"us-east-1", "us-west-2", "eu-west-1"} <= set(aws._find_regions())  # default: every enabled region
    aws.regions = [REGION, "us-west-2"]  # (searching all of moto's regions takes long)
    assert aws.find("never-launched") is None
    client = boto3.client("ec2", region_name=REGION)
    assert client.describe_instances()["Reservations"] == []  # find launched nothing
    handle = aws.launch(request(count=2, job_id="job-a", spot=False))
    assert (handle.job_id, handle.region) == ("job-a", REGION)
    assert aws.find("sn-1") == handle

    # Another process (e.g. on_kill after a crash) knows only the token; it searches the regions.
    west = aws.launch(request("sn-west", count=1, zone="us-west-2a", region="us-west-2", job_id="job-w"))
    fresh = AwsCloud(aws_conn_id="aws_default", image_id=aws.image_id, regions=["us-east-1", "us-west-2"])
    found = fresh.find("sn-west")
    assert found is not None
    assert (found.zone, found.region, found.instance_ids, found.job_id) == (
        "us-west-2a", "us-west-2", west.instance_ids, "job-w",
    )  # fmt: skip
    fresh.terminate(found)
    assert fresh.find("sn-west").instance_ids == west.instance_ids  # terminated, still that token's group


def test_console_url_of_the_first_instance(aws):
    handle = aws.launch(request(count=1))
    assert aws.console_url(handle) == (
        f"https://console.aws.amazon.com/ec2/home?region={REGION}#InstanceDetails:instanceId={handle.instance_ids[0]}"
    )
    assert aws.bill() is None and aws.failure_detail(handle) is None

"""AwsCloud on moto's EC2, S3 and IAM, set up as a user's account (a subnet per zone, a security
group, an instance profile, a launch template, a bucket per region). Moto has no interruptions:
those are set by hand on describe's answer; the end-to-end run is tests/integration/clouds/test_aws_e2e.py."""

from __future__ import annotations

import base64
import json

import boto3
import pytest

moto = pytest.importorskip("moto")

from airflow_provider_skynomad.clouds.aws.boot import UserDataError  # noqa: E402
from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud  # noqa: E402
from airflow_provider_skynomad.clouds.base import CapacityError, GroupStatus, LaunchRequest  # noqa: E402
from tests.support.aws_fixtures import (  # noqa: E402
    BUCKET,
    SIGNING_SECRET,
    account,
    amazon_image,
    instance_store,
    put_checkpoint,
)

REGION, ZONE, WEST = "us-east-1", "us-east-1a", "us-west-2"
ZONES = {REGION: ["us-east-1a", "us-east-1b"], WEST: ["us-west-2a"]}
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"


@pytest.fixture(scope="module")
def moto_env():
    """One moto account for the module (moto sets up each region's EC2 in seconds): every test uses
    its own client tokens and job ids."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "AKIATESTTESTTEST",
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": REGION,
            "AIRFLOW_CONN_AWS_DEFAULT": "aws://",
        }.items():
            env.setenv(key, value)
        with moto.mock_aws():
            yield account(ZONES)


@pytest.fixture(scope="module")
def aws(moto_env):
    """One AwsCloud for the module: it keeps only its clients (each costs a second to make through the
    Airflow hook), no job state. A test that patches a client does it with `monkeypatch` or `listen`."""
    options = {**moto_env.cloud_options(), "checkpoint_signing_secret": SIGNING_SECRET}
    return AwsCloud(aws_conn_id="aws_default", checkpoint_bucket=BUCKET, **options)


@pytest.fixture
def listen():
    """`listen(client, event, handler)`: a botocore event handler on a shared client, for this test only."""
    registered = []

    def register(client, event, handler):
        client.meta.events.register(event, handler)
        registered.append((client, event, handler))

    yield register
    for client, event, handler in registered:
        client.meta.events.unregister(event, handler)


_serial = iter(range(10**6))
P = ""  # this test's own prefix for client tokens and job ids (the moto account is shared)


@pytest.fixture(autouse=True)
def own_names():
    global P
    P = f"t{next(_serial)}"


def request(token="sn-1", spot=True, count=2, zone=ZONE, job_id="sn", region=REGION, env=None):
    token, job_id = f"{P}{token}", f"{P}{job_id}"
    return LaunchRequest(
        "aws",
        region,
        zone,
        "g4dn.xlarge",
        count,
        spot,
        token,
        command=("python", "-m", "train"),
        env=env or {"EPOCHS": "3"},
        tags={
            "skynomad-job": f"{P}sn",
            "skynomad-dag": "d",
            "skynomad-run": "r",
            "skynomad-task": "t",
            "skynomad-try": "1",
        },
        job_id=job_id,
    )


def agent_store(cloud, store: str, region: str = REGION):
    """An instance store (`instance_store`) as the job's agent on that instance sees it: its key is the job's."""
    return cloud.store.checkpoints(region, store)


def described(region, ids):
    reservations = boto3.client("ec2", region_name=region).describe_instances(InstanceIds=list(ids))["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def test_launch_uses_the_template_subnet_groups_and_profile_and_is_idempotent(aws, moto_env, listen):
    sent = []
    listen(aws.ec2(REGION), "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(params))
    first = aws.launch(request())
    again = aws.launch(request())
    assert again.instance_ids == first.instance_ids and len(first.instance_ids) == 2
    instances = described(REGION, first.instance_ids)
    for i in instances:
        assert i["SubnetId"] == moto_env.subnets[ZONE] and i["Placement"]["AvailabilityZone"] == ZONE
        assert [g["GroupId"] for g in i["SecurityGroups"]] == moto_env.security_groups[REGION]
        assert i["ImageId"] == moto_env.images[REGION]  # from the launch template
        assert i["KeyName"] == "ops"
        assert i["InstanceLifecycle"] == "spot"
    assert sent[0]["IamInstanceProfile"] == {"Name": "skynomad-instance"}
    assert sent[0]["LaunchTemplate"] == {"LaunchTemplateId": moto_env.templates[REGION], "Version": "$Default"}
    assert (sent[0]["MinCount"], sent[0]["MaxCount"], sent[0]["ClientToken"]) == (2, 2, f"{P}sn-1")
    assert len(sent) == 1  # the retry found the group by its token tag and sent nothing
    assert aws.poll(first) in (GroupStatus.RUNNING, GroupStatus.STARTING)


def test_instances_and_volumes_carry_the_job_tags(aws):
    handle = aws.launch(request())
    ec2 = boto3.client("ec2", region_name=REGION)
    for i in described(REGION, handle.instance_ids):
        tags = {t["Key"]: t["Value"] for t in i["Tags"]}
        job_tags = {k: v for k, v in tags.items() if k.startswith("skynomad-")}
        expected = {"skynomad-job": f"{P}sn", "skynomad-dag": "d", "skynomad-run": "r", "skynomad-task": "t"}
        assert job_tags == {**expected, "skynomad-try": "1", "skynomad-deployment": "default"}
        assert tags["skynomad:client-token"] == f"{P}sn-1" and tags["skynomad:job-id"] == f"{P}sn"
        volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [i["InstanceId"]]}])
        assert volumes["Volumes"]
        for volume in volumes["Volumes"]:
            vtags = {t["Key"]: t["Value"] for t in volume.get("Tags", [])}
            assert vtags["skynomad-job"] == f"{P}sn" and vtags["skynomad-try"] == "1"


def test_image_instead_of_a_template_and_an_arn_profile(moto_env):
    aws = AwsCloud(
        checkpoint_bucket=BUCKET,
        checkpoint_signing_secret=SIGNING_SECRET,
        image_id=moto_env.images,
        subnets=moto_env.subnets,
        instance_profile=moto_env.profile_arn,
    )
    sent = []
    aws.ec2(REGION).meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(params)
    )
    handle = aws.launch(request(count=1))
    (instance,) = described(REGION, handle.instance_ids)
    assert instance["ImageId"] == moto_env.images[REGION]
    assert sent[0]["IamInstanceProfile"] == {"Arn": moto_env.profile_arn} and "LaunchTemplate" not in sent[0]


def test_user_data_runs_the_agent_and_holds_no_credentials(aws):
    handle = aws.launch(request(count=1, job_id="job-a"))
    client = boto3.client("ec2", region_name=REGION)
    data = client.describe_instance_attribute(InstanceId=handle.instance_ids[0], Attribute="userData")
    script = base64.b64decode(data["UserData"]["Value"]).decode()
    assert (
        "python3 -m airflow_provider_skynomad.agent run "
        f"--store 's3://ckpt-us-east-1/skynomad/{P}job-a/{{aws:userid}}' "
        '--work-dir "$WORK_DIR" --run-id "$RUN_ID" --rank "$RANK" --notice aws -- python -m train'
    ) in script
    assert (
        f"RUN_ID={P}sn-1\n" in script
        and "export EPOCHS=3\n" in script
        and f"export SKYNOMAD_JOB_ID={P}job-a\n" in script
    )
    assert "shutdown -h now" in script
    for secret in ("AKIATESTTESTTEST", SECRET, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        assert secret not in script
    with pytest.raises(UserDataError, match="instance profile"):
        aws.launch(request("sn-2", count=1, env={"AWS_SECRET_ACCESS_KEY": SECRET}))


def test_terminate_then_poll(aws):
    handle = aws.launch(request(spot=False, count=1))
    aws.terminate(handle)
    aws.terminate(handle)  # twice is fine
    assert aws.poll(handle) is GroupStatus.TERMINATED


def test_capacity_error_is_mapped(aws, monkeypatch):
    from botocore.exceptions import ClientError

    def full(**kwargs):
        raise ClientError({"Error": {"Code": "InsufficientInstanceCapacity", "Message": "no"}}, "RunInstances")

    monkeypatch.setattr(aws.ec2(REGION), "run_instances", full)
    with pytest.raises(CapacityError, match="InsufficientInstanceCapacity"):
        aws.launch(request(token="sn-2"))


def _ended(aws, monkeypatch, codes):
    real = aws.ec2(REGION).describe_instances

    def ended(**kwargs):
        out = real(**kwargs)
        instances = [i for r in out["Reservations"] for i in r["Instances"]]
        for i, code in zip(instances, codes, strict=True):
            if code:
                i["State"] = {"Name": "terminated"}
                i["StateReason"] = {"Code": code, "Message": code}
        return out

    monkeypatch.setattr(aws.ec2(REGION), "describe_instances", ended)


def test_a_spot_interruption_is_a_preemption(aws, monkeypatch):
    handle = aws.launch(request(count=2))
    _ended(aws, monkeypatch, ["Server.SpotInstanceTermination", None])
    assert aws.poll(handle) is GroupStatus.PREEMPTED


def test_other_server_failures_are_failures_not_preemptions(aws, monkeypatch):
    handle = aws.launch(request(count=1))
    _ended(aws, monkeypatch, ["Server.InternalError"])
    assert aws.poll(handle) is GroupStatus.FAILED


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ("finished", GroupStatus.SUCCEEDED),
        ("failed", GroupStatus.FAILED),
        ("preempted", GroupStatus.PREEMPTED),
        (None, GroupStatus.FAILED),
    ],
)
def test_a_self_shutdown_is_told_by_the_agents_run_record(aws, monkeypatch, outcome, status):
    handle = aws.launch(request(count=1))
    if outcome:
        record = {
            "outcome": outcome,
            "exit_code": 1 if outcome == "failed" else 0,
            "stderr_tail": ["Traceback", "boom"],
        }
        store = instance_store(f"{P}sn", handle.instance_ids[0])  # rank 0's, where its agent writes
        agent_store(aws, store).write_run(f"{P}sn-1", record)  # as the job's agent writes it
    _ended(aws, monkeypatch, ["Client.InstanceInitiatedShutdown"])
    assert aws.poll(handle) is status
    if outcome == "failed":
        assert aws.failure_detail(handle) == "exit code 1:\nTraceback\nboom"


def test_probe_asks_for_the_gang_releases_it_and_says_what_it_cost(aws):
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 3, tags={"skynomad-job": f"{P}sn-1"})
    assert 1 <= result.available <= 3  # EC2 grants up to MaxCount; moto grants MinCount
    assert result.usd == pytest.approx(result.available * result.spot_usd_per_hour / 60, abs=1e-6)
    assert result.on_demand_usd_per_hour == 0.526  # the shipped price table, not a typed dict
    client = boto3.client("ec2", region_name=REGION)
    mine = [{"Name": "tag:skynomad-job", "Values": [f"{P}sn-1"]}]
    instances = [i for r in client.describe_instances(Filters=mine)["Reservations"] for i in r["Instances"]]
    assert len(instances) == result.available
    assert all(i["State"]["Name"] in ("shutting-down", "terminated") for i in instances)
    tags = [{t["Key"]: t["Value"] for t in i.get("Tags", []) if t["Key"].startswith("skynomad")} for i in instances]
    probe = {"skynomad-job": f"{P}sn-1", "skynomad:purpose": "probe", "skynomad-deployment": "default"}
    assert all(t == probe for t in tags)


def test_copy_moves_only_the_newest_complete_checkpoint(aws):
    east, west = boto3.client("s3", region_name=REGION), boto3.client("s3", region_name=WEST)
    put_checkpoint(east, "ckpt-us-east-1", f"{P}job-a", 1, {"model.pkl": b"one"})
    put_checkpoint(east, "ckpt-us-east-1", f"{P}job-a", 2, {"model.pkl": b"two", "opt/state.bin": b"s"})
    put_checkpoint(east, "ckpt-us-east-1", f"{P}job-a", 3, {"model.pkl": b"half"}, manifest=False)  # upload cut off
    handle = aws.launch(request(count=1, job_id="job-b"))
    put_checkpoint(east, "ckpt-us-east-1", instance_store(f"{P}job-b", handle.instance_ids[0]), 5, {"model.pkl": b"B"})
    assert aws.copy_checkpoint("us-east-1a", "us-west-2a", 1.0, job_id=f"{P}job-a") is True
    keys = sorted(o["Key"] for o in west.list_objects_v2(Bucket="ckpt-us-west-2")["Contents"])
    assert keys == [
        f"skynomad/{P}job-a/checkpoints/0000000002/MANIFEST.json",
        f"skynomad/{P}job-a/checkpoints/0000000002/files/model.pkl",
        f"skynomad/{P}job-a/checkpoints/0000000002/files/opt/state.bin",
        f"skynomad/{P}job-a/progress.json",
    ]
    body = west.get_object(Bucket="ckpt-us-west-2", Key=f"skynomad/{P}job-a/checkpoints/0000000002/files/model.pkl")
    assert body["Body"].read() == b"two"
    assert aws.copy_checkpoint("us-east-1a", "us-west-2a", 1.0, job_id=f"{P}job-c") is False  # it has none
    assert aws.copy_checkpoint("us-east-1a", "us-east-1b", 1.0, job_id=f"{P}job-a") is False  # one bucket per region
    assert aws.progress(handle) == pytest.approx(0.5)
    assert aws.progress(aws.launch(request("c", count=1, job_id="job-c"))) is None


def test_one_bucket_for_every_region_copies_nothing_but_counts_the_move(moto_env):
    boto3.client("s3").create_bucket(Bucket="ckpt-all")
    aws = AwsCloud(checkpoint_bucket="ckpt-all", checkpoint_signing_secret=SIGNING_SECRET, **moto_env.cloud_options())
    assert aws.copy_checkpoint("us-east-1a", "us-west-2a", 1.0, job_id=f"{P}job-a") is False
    put_checkpoint(boto3.client("s3"), "ckpt-all", f"{P}job-a", 1, {"model.pkl": b"one"})
    assert aws.copy_checkpoint("us-east-1a", "us-west-2a", 1.0, job_id=f"{P}job-a") is True
    assert len(boto3.client("s3").list_objects_v2(Bucket="ckpt-all")["Contents"]) == 3


def test_find_returns_the_launch_of_a_token_without_launching(aws, moto_env):
    before = boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"]
    assert aws.find("never-launched") is None
    assert boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"] == before  # launched nothing
    handle = aws.launch(request(count=2, job_id="job-a", spot=False))
    assert (handle.job_id, handle.region) == (f"{P}job-a", REGION)
    assert aws.find(f"{P}sn-1") == handle
    # Another process (e.g. on_kill after a crash) knows only the token; it searches the configured regions.
    west = aws.launch(request("sn-west", count=1, zone="us-west-2a", region=WEST, job_id="job-w"))
    fresh = AwsCloud(checkpoint_bucket=BUCKET, **moto_env.cloud_options())
    found = fresh.find(f"{P}sn-west")
    assert (found.zone, found.region, found.instance_ids, found.job_id) == (
        "us-west-2a",
        WEST,
        west.instance_ids,
        f"{P}job-w",
    )
    fresh.terminate(found)
    assert fresh.find(f"{P}sn-west").instance_ids == west.instance_ids  # terminated, still that token's group


def test_resources_and_release_find_what_jobs_left(aws):
    handle = aws.launch(request(count=1, job_id="job-a"))
    put_checkpoint(boto3.client("s3"), "ckpt-us-east-1", f"{P}job-a", 1, {"model.pkl": b"one"})
    found = aws.resources(tags={"skynomad-job": f"{P}sn"}) + aws.resources(tags={"skynomad-job": f"{P}job-a"})
    kinds = sorted((r.kind, r.id) for r in found)
    assert ("instance", handle.instance_ids[0]) in kinds
    assert ("checkpoint", f"s3://ckpt-us-east-1/skynomad/{P}job-a/") in kinds
    assert ("instance", handle.instance_ids[0]) in [(r.kind, r.id) for r in aws.resources()]  # any job
    assert aws.resources(tags={"skynomad-job": "other"}) == []
    for resource in found:
        aws.release(resource)
        aws.release(resource)  # twice is fine
    left = aws.resources(tags={"skynomad-job": f"{P}sn"}) + aws.resources(tags={"skynomad-job": f"{P}job-a"})
    assert [r for r in left if r.kind != "spot_request"] == []


def test_console_url_of_the_first_instance(aws):
    handle = aws.launch(request(count=1))
    assert aws.console_url(handle) == (
        f"https://console.aws.amazon.com/ec2/home?region={REGION}#InstanceDetails:instanceId={handle.instance_ids[0]}"
    )
    assert aws.bill() is None and aws.failure_detail(handle) is None
    assert aws.output_location(f"{P}sn", ZONE) is None  # nothing uploaded yet
    store = instance_store(f"{P}sn", handle.instance_ids[0])
    put_output(store, signed_by=f"{P}sn")  # as the job's agent uploads it
    assert aws.output_location(f"{P}sn", ZONE) == f"s3://ckpt-us-east-1/skynomad/{store}/output/"


def put_output(store: str, signed_by: str | None, created_at: str = "2026-01-01T00:00:00.000Z") -> None:
    """An empty output manifest in `store`, signed with job `signed_by`'s key (None: unsigned)."""
    from airflow_provider_skynomad.agent.signing import derive_job_key, sign

    manifest = {"format": 1, "files": [], "created_at": created_at}
    if signed_by is not None:
        manifest = sign(manifest, derive_job_key(SIGNING_SECRET, signed_by))
    body = json.dumps(manifest).encode()
    boto3.client("s3").put_object(Bucket="ckpt-us-east-1", Key=f"skynomad/{store}/output/MANIFEST.json", Body=body)


def test_the_output_location_is_only_an_output_that_verifies_with_the_jobs_key(aws):
    """Another job's instance may write under its own name in this job's prefix: its output is not this job's."""
    job = f"{P}out"
    assert aws.output_location(job, ZONE) is None
    put_output(instance_store(job, "i-0unsigned", "AROA0FORGER"), None, created_at="2099-01-01T00:00:00.000Z")
    put_output(instance_store(job, "i-0foreign", "AROA0FORGER"), f"{P}other", created_at="2099-01-01T00:00:00.000Z")
    assert aws.output_location(job, ZONE) is None
    mine = instance_store(job, "i-0mine")
    put_output(mine, job)
    assert aws.output_location(job, ZONE) == f"s3://ckpt-us-east-1/skynomad/{mine}/output/"


def test_a_launch_brings_the_newest_checkpoint_into_its_region_before_the_instances_boot(aws, monkeypatch, listen):
    east, west = boto3.client("s3", region_name=REGION), boto3.client("s3", region_name=WEST)
    put_checkpoint(east, "ckpt-us-east-1", f"{P}mv", 7, {"model.pkl": b"seven"})
    keys_at_launch = []
    real = aws.ec2(WEST).run_instances

    def run_instances(**kwargs):
        listed = west.list_objects_v2(Bucket="ckpt-us-west-2", Prefix=f"skynomad/{P}mv/")
        keys_at_launch.extend(sorted(o["Key"] for o in listed.get("Contents", [])))
        return real(**kwargs)

    monkeypatch.setattr(aws.ec2(WEST), "run_instances", run_instances)
    aws.launch(request("w", count=1, zone="us-west-2a", region=WEST, job_id="mv"))
    assert f"skynomad/{P}mv/checkpoints/0000000007/MANIFEST.json" in keys_at_launch
    assert f"skynomad/{P}mv/progress.json" in keys_at_launch
    # The job runtime's copy after the launch finds it in place: True (it existed), nothing sent again.
    sent = []
    listen(aws.s3(WEST), "before-parameter-build.s3.CopyObject", lambda **_: sent.append(1))
    assert aws.copy_checkpoint("us-east-1a", "us-west-2a", 1.0, job_id=f"{P}mv") is True
    assert sent == []


def test_checkpoint_store_is_the_jobs_regional_prefix_through_the_hooks_client(aws):
    put_checkpoint(boto3.client("s3", region_name=WEST), "ckpt-us-west-2", f"{P}cs", 3, {"model.pkl": b"m"})
    store = aws.checkpoint_store(f"{P}cs", "us-west-2a")
    assert store.uri == f"s3://ckpt-us-west-2/skynomad/{P}cs"
    assert store.complete_seqs() == [3] and store.read_progress()["step"] == 3
    assert AwsCloud().checkpoint_store("j", "us-west-2a") is None  # no bucket: no store


# -- request probes: an EC2 Fleet of type request, deleted as soon as EC2 answers ----------------


@pytest.fixture
def fleets(monkeypatch):
    from tests.support.aws_fixtures import FleetEvents

    return FleetEvents(monkeypatch)


def instances_tagged(probe_id: str) -> list[dict]:
    client = boto3.client("ec2", region_name=REGION)
    found = client.describe_instances(Filters=[{"Name": "tag:skynomad:probe-id", "Values": [probe_id]}])
    return [i for r in found["Reservations"] for i in r["Instances"]]


def probe_id_of(fleet) -> str:
    return next(t["value"] for t in fleet.get_tags() if t["key"] == "skynomad:probe-id")


def test_a_request_fleets_instances_carry_the_probe_tags_from_creation(aws, fleets):
    job = f"{P}req-1"
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 2, tags={"skynomad-job": job}, kind="request")
    (fleet,) = fleets.created
    assert fleet.type == "request" and fleets.deleted == [(fleet.id, True)]  # deleted, instances terminated
    instances = instances_tagged(probe_id_of(fleet))
    assert len(instances) == 2 and all(i["State"]["Name"] in ("shutting-down", "terminated") for i in instances)
    for instance in instances:  # the tags the shipped IAM policy and `skynomad cleanup` go by
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags["skynomad-deployment"] == "default" and tags["skynomad:purpose"] == "probe"
        assert tags["skynomad-job"] == job
        assert instance["SubnetId"] == aws.subnets[ZONE] and instance["InstanceLifecycle"] == "spot"
    assert {t["key"]: t["value"] for t in fleet.get_tags()}["skynomad-deployment"] == "default"
    # moto starts instances running: the race lost, each billed EC2's 60 s minimum
    assert (result.kind, result.requested, result.available, result.billed) == ("request", 2, 2, 2)
    assert result.usd == pytest.approx(2 * result.spot_usd_per_hour / 60, abs=1e-6)
    client = boto3.client("ec2", region_name=REGION)
    names = [t["LaunchTemplateName"] for t in client.describe_launch_templates()["LaunchTemplates"]]
    assert not [n for n in names if n.startswith("skynomad-probe-")]  # the probe's template is gone
    assert SECRET not in json.dumps([i.get("Tags") for i in instances], default=str)


def test_instances_deleted_while_pending_saw_capacity_and_billed_nothing(aws, fleets):
    fleets.launches_pending()
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 3, tags={"skynomad-job": f"{P}req-2"}, kind="request")
    assert (result.available, result.billed, result.usd) == (3, 0, 0.0)
    assert all(i["State"]["Name"] != "running" for i in instances_tagged(probe_id_of(fleets.created[0])))


def test_no_capacity_is_zero_seen_free_and_the_fleet_deleted(aws, fleets):
    fleets.no_capacity()
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 1, tags={"skynomad-job": f"{P}req-3"}, kind="request")
    assert (result.kind, result.available, result.billed, result.usd) == ("request", 0, 0, 0.0)
    assert fleets.deleted == [(fleets.created[0].id, True)]


def test_a_refusal_fails_the_zone_naming_it(aws, fleets):
    fleets.no_capacity()
    fleets.records[:] = [
        {
            "EventType": "service-error",
            "Timestamp": "2026-01-01T00:00:01Z",
            "EventInformation": {"EventSubType": "spotInstanceCountLimitExceeded", "EventDescription": "limit"},
        }
    ]
    with pytest.raises(RuntimeError, match="spotInstanceCountLimitExceeded"):
        aws.probe(REGION, ZONE, "g4dn.xlarge", 1, kind="request")
    assert len(fleets.deleted) == 1


def test_no_answer_fails_the_zone_and_what_raced_in_is_terminated(aws, fleets):
    from airflow_provider_skynomad.clouds.aws.cloud import PURPOSE_TAG
    from airflow_provider_skynomad.clouds.aws.probe import ProbeNoAnswer, request_probe

    fleets.hides_instances()  # the fleet launches, but the probe never sees it before the delete
    waited = []
    tags = {PURPOSE_TAG: "probe", "skynomad-deployment": "default"}
    with pytest.raises(ProbeNoAnswer, match="did not answer"):
        request_probe(
            aws,
            REGION,
            ZONE,
            "g4dn.xlarge",
            1,
            tags,
            wait_seconds=3,
            sleep=waited.append,
            clock=iter(range(100)).__next__,
        )
    assert waited == [1.0, 1.0]  # polled once a second until the deadline
    (instance,) = instances_tagged(probe_id_of(fleets.created[0]))
    assert instance["State"]["Name"] in ("shutting-down", "terminated")


def test_an_instance_first_seen_after_the_delete_is_counted_billed(aws, fleets, monkeypatch):
    from airflow_provider_skynomad.clouds.aws import probe as aws_probe

    fleets.no_capacity()  # the history says no capacity at once ...
    created = fleets.created
    real = aws_probe._end_what_the_fleet_launched

    def raced(client, zone, probe_id, known):  # ... but EC2 launched one just before the delete
        image = amazon_image(client)
        tag = [{"Key": "skynomad:probe-id", "Value": probe_id}, {"Key": "skynomad-deployment", "Value": "default"}]
        client.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType="g4dn.xlarge",
            TagSpecifications=[{"ResourceType": "instance", "Tags": tag}],
        )
        return real(client, zone, probe_id, known)

    monkeypatch.setattr(aws_probe, "_end_what_the_fleet_launched", raced)
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 1, kind="request")
    assert (result.available, result.billed) == (1, 1)
    (instance,) = instances_tagged(probe_id_of(created[0]))
    assert instance["State"]["Name"] in ("shutting-down", "terminated")


def test_a_request_probe_needs_an_image_and_launch_probes_keep_their_meaning(aws):
    result = aws.probe(REGION, ZONE, "g4dn.xlarge", 1, tags={"skynomad-job": f"{P}req-4"})
    assert (result.kind, result.billed_instances) == ("launch", result.available)
    bare = AwsCloud(aws_conn_id="aws_default", subnets=aws.subnets)
    with pytest.raises(ValueError, match="needs an image"):
        bare.probe(REGION, ZONE, "g4dn.xlarge", 1, kind="request")
    with pytest.raises(ValueError, match="cannot probe by 'offer'"):
        aws.probe(REGION, ZONE, "g4dn.xlarge", 1, kind="offer")


def test_a_launch_drops_the_checkpoints_of_ended_instances_but_the_newest(aws):
    """Each instance keeps its own two newest checkpoints: without this a job would keep two per instance."""
    s3, bucket, job = boto3.client("s3"), "ckpt-us-east-1", f"{P}job-p"
    running = aws.launch(request("p-run", count=1, job_id="job-p-other"))  # an instance still there
    stores = {name: instance_store(job, i) for name, i in [("gone", "i-0gone"), ("newest", "i-0newer")]}
    stores["running"] = instance_store(job, running.instance_ids[0])
    for seq, name in enumerate(["gone", "running", "newest"], start=1):
        put_checkpoint(s3, bucket, stores[name], seq, {"model.pkl": name.encode()})
    s3.put_object(Bucket=bucket, Key=f"skynomad/{stores['gone']}/runs/t.json", Body=b"{}")
    aws.launch(request("p-next", count=1, job_id="job-p"))

    def checkpoints(name):
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"skynomad/{stores[name]}/checkpoints/")
        return len(listed.get("Contents", []))

    assert (checkpoints("gone"), checkpoints("running"), checkpoints("newest")) == (0, 2, 2)
    assert s3.get_object(Bucket=bucket, Key=f"skynomad/{stores['gone']}/runs/t.json")  # its run record stays


# -- what an instance writes is evidence, not truth (issue 31, breaks 4 and 5) --------------------
#
# Each instance writes only its own instance store (``<job>/<ROLE_ID>:<INSTANCE_ID>``), but may
# write one under its own name in any job's prefix of the deployment: what a store holds counts only
# when it verifies with the job's key, whichever store it is.

SIGNING = SIGNING_SECRET


@pytest.fixture(scope="module")
def signed(moto_env):
    """An AwsCloud whose connection has a signing secret (the default a real cloud needs)."""
    options = moto_env.cloud_options()
    return AwsCloud(aws_conn_id="aws_default", checkpoint_bucket=BUCKET, checkpoint_signing_secret=SIGNING, **options)


def upload(cloud, store: str, zone: str, tmp_path, step: int, marker: bytes) -> int:
    """A checkpoint written into `store` the way the job's own agent writes it (signed with the job's key)."""
    from airflow_provider_skynomad.agent.snapshot import hash_all

    staged = tmp_path / f"staged-{step}-{marker.hex()}"
    staged.mkdir()
    (staged / "who").write_bytes(marker)
    return agent_store(cloud, store, zone[:-1]).upload_checkpoint(staged, hash_all(staged), step, 10)


def forge(region: str, store: str, seq: int, key: bytes | None) -> None:
    """A complete checkpoint `seq` claiming the job done, planted in `store` (a job's prefix or an instance store)."""
    import hashlib

    from airflow_provider_skynomad.agent.signing import sign

    s3, bucket = boto3.client("s3", region_name=region), BUCKET.format(region=region)
    base = f"skynomad/{store}/checkpoints/{seq:010d}"
    s3.put_object(Bucket=bucket, Key=f"{base}/files/who", Body=b"forged")
    files = [{"path": "who", "size": 6, "sha256": hashlib.sha256(b"forged").hexdigest()}]
    manifest = {"format": 1, "seq": seq, "step": 10, "total_steps": 10, "files": files, "created_at": "x"}
    body = manifest if key is None else sign(manifest, key)
    s3.put_object(Bucket=bucket, Key=f"{base}/MANIFEST.json", Body=json.dumps(body).encode())


def restored(cloud, job_id: str, zone: str, tmp_path) -> bytes | None:
    """What the job's agent would restore in `zone`, by its marker file."""
    found = cloud.checkpoint_store(job_id, zone).restore(tmp_path / "restored", tmp_path / "scratch")
    return None if found is None else (tmp_path / "restored" / "who").read_bytes()


FORGER = "AROAANOTHERJOBSROLE"  # another deployment job's instance, writing under its own name


def test_break_4_a_forged_run_record_does_not_end_an_aws_job(signed, monkeypatch):
    from airflow_provider_skynomad.agent.signing import derive_job_key, sign

    handle = signed.launch(request("b4", count=1, job_id="b4"))
    rank0 = instance_store(f"{P}b4", handle.instance_ids[0])  # where the group's run record is read
    finished = {"run_id": f"{P}b4", "rank": 0, "outcome": "finished", "exit_code": 0, "stderr_tail": []}
    key = f"skynomad/{rank0}/runs/{P}b4.json"
    boto3.client("s3").put_object(Bucket="ckpt-us-east-1", Key=key, Body=json.dumps(finished))
    _ended(signed, monkeypatch, ["Client.InstanceInitiatedShutdown"])
    assert signed.poll(handle) is GroupStatus.FAILED  # powered off with no record that verifies
    foreign = sign({**finished, "kind": "run"}, derive_job_key(SIGNING, "other"))
    boto3.client("s3").put_object(Bucket="ckpt-us-east-1", Key=key, Body=json.dumps(foreign))
    assert signed.poll(handle) is GroupStatus.FAILED
    agent_store(signed, rank0).write_run(f"{P}b4", finished)  # the job's own agent
    assert signed.poll(handle) is GroupStatus.SUCCEEDED
    _ended(signed, monkeypatch, ["Server.SpotInstanceTermination"])
    assert signed.poll(handle) is GroupStatus.PREEMPTED  # a logged interruption wins over the record


def test_break_4_forged_unsigned_progress_is_not_progress_on_aws(signed, tmp_path):
    handle = signed.launch(request("b4p", count=1, job_id="b4p"))
    rank0 = instance_store(f"{P}b4p", handle.instance_ids[0])
    done = {"step": 10, "total_steps": 10, "seq": 99}
    s3 = boto3.client("s3")
    s3.put_object(Bucket="ckpt-us-east-1", Key=f"skynomad/{rank0}/progress.json", Body=json.dumps(done))
    s3.put_object(Bucket="ckpt-us-east-1", Key=f"skynomad/{P}b4p/progress.json", Body=json.dumps(done))
    forge(REGION, instance_store(f"{P}b4p", "i-0forger", FORGER), 99, None)  # nor is a forged checkpoint
    assert signed.progress(handle) is None
    upload(signed, rank0, ZONE, tmp_path, 4, b"mine")
    assert signed.progress(handle) == pytest.approx(0.4)


def test_progress_is_dated_by_when_the_agent_wrote_it_and_the_date_is_signed(signed, tmp_path):
    """The pace dates a checkpoint by progress.json's `updated_at` (jobs/watch.py), so it is read on the
    cloud's clock, and a date changed after signing makes the progress count for nothing."""
    import time

    handle = signed.launch(request("dated", count=1, job_id="dated"))
    rank0 = instance_store(f"{P}dated", handle.instance_ids[0])
    before = time.time()
    upload(signed, rank0, ZONE, tmp_path, 4, b"mine")
    after = time.time()
    done = signed.progress(handle)
    assert done == pytest.approx(0.4)
    assert signed.hours_at_wall(before - 0.001) <= done.at_hours <= signed.hours_at_wall(after) <= signed.now_hours()
    key = f"skynomad/{rank0}/progress.json"
    s3 = boto3.client("s3")
    claim = json.loads(s3.get_object(Bucket="ckpt-us-east-1", Key=key)["Body"].read())
    redated = {**claim, "updated_at": "2020-01-01T00:00:00.000Z"}
    s3.put_object(Bucket="ckpt-us-east-1", Key=key, Body=json.dumps(redated))
    assert signed.store.progress(REGION, rank0) is None


def test_break_5_copy_skips_unverifiable_manifests_in_the_source_on_aws(signed, tmp_path):
    from airflow_provider_skynomad.agent.signing import derive_job_key

    job = f"{P}b5"
    mine = instance_store(job, "i-0b5agent")
    upload(signed, mine, ZONE, tmp_path, 3, b"older")
    upload(signed, mine, ZONE, tmp_path, 4, b"mine")
    forge(REGION, mine, 3, None)
    forge(REGION, instance_store(job, "i-0forger", FORGER), 4, derive_job_key(SIGNING, "other"))
    forge(REGION, job, 5, None)  # the job's own prefix, where a copy from another cloud lands
    assert signed.copy_checkpoint(ZONE, "us-west-2a", 1.0, job_id=job) is True
    west = boto3.client("s3", region_name=WEST)
    listed = west.list_objects_v2(Bucket="ckpt-us-west-2", Prefix=f"skynomad/{job}/")["Contents"]
    keys = sorted(o["Key"] for o in listed)
    assert keys == [
        f"skynomad/{mine}/checkpoints/0000000002/MANIFEST.json",
        f"skynomad/{mine}/checkpoints/0000000002/files/who",
        f"skynomad/{mine}/progress.json",
    ]
    assert restored(signed, job, "us-west-2a", tmp_path) == b"mine"
    moved = signed.launch(request("b5w", count=1, zone="us-west-2a", region=WEST, job_id="b5"))
    assert signed.progress(moved) == pytest.approx(0.4)


def test_break_5_a_forged_sequence_number_in_the_target_does_not_block_later_copies_on_aws(signed, tmp_path):
    job = f"{P}b5t"
    mine = instance_store(job, "i-0b5tagent")
    forge(WEST, mine, 9_999_999_999, None)  # at the very path the copy writes to
    forge(WEST, instance_store(job, "i-0forger", FORGER), 9_999_999_999, None)
    upload(signed, mine, ZONE, tmp_path, 2, b"first")
    assert signed.copy_checkpoint(ZONE, "us-west-2a", 1.0, job_id=job) is True
    assert restored(signed, job, "us-west-2a", tmp_path / "a") == b"first"
    upload(signed, mine, ZONE, tmp_path, 5, b"second")
    signed.launch(request("b5t", count=1, zone="us-west-2a", region=WEST, job_id="b5t"))  # brings it before boot
    assert restored(signed, job, "us-west-2a", tmp_path / "b") == b"second"


def test_break_5_an_aws_connection_without_a_signing_secret_launches_nothing(moto_env):
    unsigned = AwsCloud(aws_conn_id="aws_default", checkpoint_bucket=BUCKET, **moto_env.cloud_options())
    before = boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"]
    with pytest.raises(ValueError, match="checkpoint_signing_secret") as refused:
        unsigned.launch(request("nokey", count=1, job_id="nokey"))
    assert "openssl rand -hex 32" in str(refused.value) and len(str(refused.value).splitlines()) == 1
    assert boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"] == before
    listed = boto3.client("s3").list_objects_v2(Bucket="ckpt-us-east-1", Prefix=f"skynomad/{P}nokey/")
    assert listed.get("KeyCount", 0) == 0  # not even the owner record
    assert any("checkpoint_signing_secret" in p for p in unsigned.check([ZONE]))


def test_break_5_the_copy_falls_back_as_restore_does(signed, tmp_path):
    """A newest checkpoint with a file gone is skipped by the copy for the one before, as restore skips it."""
    job = f"{P}b5f"
    mine = instance_store(job, "i-0b5fagent")
    upload(signed, mine, ZONE, tmp_path, 3, b"older")
    upload(signed, mine, ZONE, tmp_path, 4, b"newest")
    boto3.client("s3").delete_object(Bucket="ckpt-us-east-1", Key=f"skynomad/{mine}/checkpoints/0000000002/files/who")
    assert restored(signed, job, ZONE, tmp_path / "source") == b"older"
    assert signed.copy_checkpoint(ZONE, "us-west-2a", 1.0, job_id=job) is True
    assert restored(signed, job, "us-west-2a", tmp_path / "target") == b"older"
    moved = signed.launch(request("b5f", count=1, zone="us-west-2a", region=WEST, job_id="b5f"))
    assert signed.progress(moved) == pytest.approx(0.3)  # the copied checkpoint's, not the broken newer one's

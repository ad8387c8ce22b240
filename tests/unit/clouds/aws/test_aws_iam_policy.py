"""The IAM policies in docs/iam/ cover every AWS API call the adapter makes.

The calls are recorded, not listed by hand: a botocore ``before-parameter-build`` hook on every client created
while `AwsCloud` goes through all it does (launch, retry, poll, progress, failure detail, probe,
signals, copy, check, resources, release) against moto. The end-to-end test (tests/integration/
clouds/test_aws_e2e.py) checks its own recorded calls with `uncovered` too.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from pathlib import Path

import boto3
import pytest

DOCS = Path(__file__).resolve().parents[4] / "docs" / "iam"
AIRFLOW_POLICY = DOCS / "skynomad-airflow-policy.json"
INSTANCE_POLICY = DOCS / "skynomad-instance-policy.json"

# S3 API operations → the IAM actions they need (EC2's actions are named like its operations).
S3_ACTIONS = {
    "ListObjectsV2": ["s3:ListBucket"],
    "ListObjects": ["s3:ListBucket"],
    "HeadBucket": ["s3:ListBucket"],
    "GetObject": ["s3:GetObject"],
    "HeadObject": ["s3:GetObject"],
    "PutObject": ["s3:PutObject"],
    "CopyObject": ["s3:GetObject", "s3:PutObject"],
    "UploadPartCopy": ["s3:GetObject", "s3:PutObject"],
    "CreateMultipartUpload": ["s3:PutObject"],
    "UploadPart": ["s3:PutObject"],
    "CompleteMultipartUpload": ["s3:PutObject"],
    "DeleteObject": ["s3:DeleteObject"],
    "DeleteObjects": ["s3:DeleteObject"],
}
NEEDS_NO_PERMISSION = {("sts", "GetCallerIdentity")}


def allowed_actions(path: Path = AIRFLOW_POLICY) -> list[str]:
    policy = json.loads(path.read_text())
    actions = []
    for statement in policy["Statement"]:
        if statement["Effect"] != "Allow":
            continue  # a Deny narrows what the Allows grant (tests/unit/clouds/aws/test_iam_isolation.py)
        listed = statement["Action"]
        actions += [listed] if isinstance(listed, str) else listed
    return actions


def iam_actions(service: str, operation: str) -> list[str]:
    if (service, operation) in NEEDS_NO_PERMISSION:
        return []
    if service == "s3":
        return S3_ACTIONS[operation]  # a KeyError here: a new S3 call; add what it needs
    return [f"{service}:{operation}"]


def uncovered(calls, policy: Path = AIRFLOW_POLICY) -> list[str]:
    """The IAM actions `calls` ((service, operation) pairs) need that the policy does not allow."""
    allowed = allowed_actions(policy)
    needed = sorted({a for service, operation in calls for a in iam_actions(service, operation)})
    return [a for a in needed if not any(fnmatch.fnmatchcase(a, pattern) for pattern in allowed)]


class Recorder:
    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()

    def attach(self, client) -> None:
        service = client.meta.service_model.endpoint_prefix
        client.meta.events.register(
            "before-parameter-build", lambda model, **_: self.calls.update([(service, model.name)])
        )

    def install(self, monkeypatch) -> None:
        import botocore.session

        real = botocore.session.Session.create_client

        def create_client(session, *args, **kwargs):
            made = real(session, *args, **kwargs)
            self.attach(made)
            return made

        monkeypatch.setattr(botocore.session.Session, "create_client", create_client)


def test_the_policies_are_valid_and_scoped():
    for path in (AIRFLOW_POLICY, INSTANCE_POLICY):
        policy = json.loads(path.read_text())
        assert policy["Version"] == "2012-10-17" and policy["Statement"]
    # The instance role writes only under its own session's name, nothing in EC2 or IAM.
    assert set(allowed_actions(INSTANCE_POLICY)) == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    statements = json.loads(INSTANCE_POLICY.read_text())["Statement"]
    writes = [s for s in statements if s["Effect"] == "Allow" and "s3:PutObject" in s["Action"]]
    assert writes and all(s["Resource"].endswith("/CHECKPOINT_PREFIX/*/${aws:userid}/*") for s in writes)
    # PassRole only for the instance role, only to EC2.
    (pass_role,) = [s for s in json.loads(AIRFLOW_POLICY.read_text())["Statement"] if "iam:PassRole" in s["Action"]]
    assert pass_role["Resource"].endswith(":role/skynomad-instance")
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    assert uncovered([("ec2", "CreateVpc")]) == ["ec2:CreateVpc"]  # the check can fail


def test_every_call_the_adapter_makes_is_allowed(monkeypatch):
    moto = pytest.importorskip("moto")
    from botocore.stub import Stubber

    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from tests.support.aws_fixtures import BUCKET, SIGNING_SECRET, FleetEvents, account, put_checkpoint

    for key, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", "aws://")
    recorder = Recorder()
    with moto.mock_aws():
        acct = account({"us-east-1": ["us-east-1a"], "us-west-2": ["us-west-2a"]})
        put_checkpoint(boto3.client("s3"), "ckpt-us-east-1", "job", 1, {"model.pkl": b"m"})
        recorder.install(monkeypatch)  # from here on: the adapter's clients only
        cloud = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, **acct.cloud_options())
        request = LaunchRequest(
            "aws", "us-east-1", "us-east-1a", "g4dn.xlarge", 1, True, "tok", command=("true",), job_id="job"
        )
        handle = cloud.launch(request)
        assert cloud.launch(request) == handle and cloud.find("tok") == handle
        cloud.poll(handle), cloud.progress(handle), cloud.failure_detail(handle)
        cloud.probe("us-east-1", "us-east-1a", "g4dn.xlarge", 2, tags={"skynomad-job": "job"})
        fleets = FleetEvents(monkeypatch)  # request probes: one that found capacity, one that did not
        cloud.probe("us-east-1", "us-east-1a", "g4dn.xlarge", 1, tags={"skynomad-job": "job"}, kind="request")
        fleets.no_capacity()
        cloud.probe("us-east-1", "us-east-1a", "g4dn.xlarge", 1, kind="request")
        assert cloud.copy_checkpoint("us-east-1a", "us-west-2a", 1.0, job_id="job") is True
        assert cloud.check(["us-east-1a", "us-west-2a"], "g4dn.xlarge") == []
        for resource in cloud.resources():
            cloud.release(resource)
        cloud.terminate(handle)
        cloud.poll(handle)
        # Placement scores: moto has none; the same client, stubbed, still goes through the hook.
        with Stubber(cloud.ec2("us-east-1")) as stub:
            stub.add_response("describe_availability_zones", {"AvailabilityZones": []})
            stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": []})
            stub.add_response("describe_spot_price_history", {"SpotPriceHistory": []})
            cloud.signals("us-east-1", ["us-east-1a"], "g4dn.xlarge", 2)
    calls = set(recorder.calls)
    for needed in [
        ("ec2", "RunInstances"),
        ("ec2", "GetSpotPlacementScores"),
        ("s3", "CopyObject"),
        ("ec2", "TerminateInstances"),
        ("ec2", "CreateLaunchTemplate"),
        ("ec2", "CreateFleet"),
        ("ec2", "DescribeFleetInstances"),
        ("ec2", "DescribeFleetHistory"),
        ("ec2", "DeleteFleets"),
        ("ec2", "DeleteLaunchTemplate"),
    ]:
        assert needed in calls, sorted(calls)
    assert uncovered(calls) == [], sorted(calls)


@pytest.mark.parametrize("doc", ["docs/clouds.md", "README.md"])
def test_docs_show_the_policies_the_files_hold(doc):
    import re

    text = (DOCS.parent.parent / doc).read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", text, flags=re.S)]
    assert blocks == [json.loads(AIRFLOW_POLICY.read_text()), json.loads(INSTANCE_POLICY.read_text())]

"""Bad AWS input is found before any launch (`AwsCloud.check`), each problem naming its setting;
plus the free signals (spot placement scores through a Stubber: moto has none) and the boot script
refusing credentials."""

from __future__ import annotations

import sys

import boto3
import pytest

moto = pytest.importorskip("moto")

from airflow_provider_skynomad.clouds.aws.boot import UserDataError, boot_script  # noqa: E402
from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud  # noqa: E402
from tests.support.aws_fixtures import BUCKET, SIGNING_SECRET, account  # noqa: E402

REGION = "us-east-1"


@pytest.fixture(scope="module")
def acct():
    with pytest.MonkeyPatch.context() as env:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AIRFLOW_CONN_AWS_DEFAULT": "aws://",
        }.items():
            env.setenv(key, value)
        with moto.mock_aws():
            yield account({REGION: ["us-east-1a", "us-east-1b"]})


def launched():
    return boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"]


def test_a_good_configuration_has_no_problems(acct):
    cloud = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, **acct.cloud_options())
    assert cloud.check(["us-east-1a", "us-east-1b"], "g4dn.xlarge") == []
    assert cloud.check() == []  # every configured zone
    assert launched() == []


def test_a_zone_without_a_subnet_an_unknown_template_and_a_missing_bucket_are_named(acct):
    cloud = AwsCloud(
        checkpoint_signing_secret=SIGNING_SECRET,
        checkpoint_bucket="nobody-made-this-{region}",
        **acct.cloud_options(launch_template={REGION: "lt-0123456789abcdef0"}),
    )
    problems = cloud.check(["us-east-1a", "us-east-1c"], "g4dn.xlarge")
    assert problems == [
        "cloud_options.launch_template: lt-0123456789abcdef0 does not exist in us-east-1",
        "cloud_options.subnets has no subnet for us-east-1c",
        "checkpoint_bucket: bucket nobody-made-this-us-east-1 (for us-east-1) does not exist",
    ]
    assert launched() == []  # nothing was launched to find out


def test_a_template_name_an_image_subnets_and_groups_that_do_not_exist(acct):
    options = acct.cloud_options(
        launch_template="no-such-template",
        image_id="ami-00000000000000000",
        subnets={"us-east-1a": acct.subnets["us-east-1b"], "us-east-1b": "subnet-0000000000000000f"},
        security_group_ids=[acct.security_groups[REGION][0], "sg-0000000000000000f"],
    )
    problems = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, **options).check()
    assert problems == [
        "cloud_options.launch_template: no-such-template does not exist in us-east-1",
        "cloud_options.image_id: ami-00000000000000000 does not exist in us-east-1",
        f"cloud_options.subnets.us-east-1a: {acct.subnets['us-east-1b']} is in us-east-1b, not us-east-1a",
        "cloud_options.subnets.us-east-1b: subnet-0000000000000000f does not exist in us-east-1",
        "cloud_options.security_group_ids: sg-0000000000000000f does not exist in us-east-1",
    ]


def test_neither_template_nor_image_nor_bucket(acct):
    cloud = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, subnets=acct.subnets)
    assert cloud.check(["us-east-1a"]) == [
        "cloud_options.launch_template or cloud_options.image_id: neither is set for us-east-1 "
        "(give one, or a {region: value} map that includes it)",
        "checkpoint_bucket: not set on the skynomad connection (the agent keeps the job's checkpoints there)",
    ]


def test_bad_credentials_are_named(acct, monkeypatch):
    from botocore.exceptions import NoCredentialsError

    cloud = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, **acct.cloud_options())

    class Sts:
        def get_caller_identity(self):
            raise NoCredentialsError()

    monkeypatch.setattr(cloud, "sts", lambda: Sts())
    (problem,) = cloud.check(["us-east-1a"])
    assert problem.startswith("aws_conn_id 'aws_default': the credentials do not work")


def test_signals_are_placement_scores_and_spot_prices_per_zone(acct):
    from botocore.stub import ANY, Stubber

    cloud = AwsCloud(checkpoint_signing_secret=SIGNING_SECRET, checkpoint_bucket=BUCKET, **acct.cloud_options())
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    cloud._clients[REGION] = client
    stub = Stubber(client)
    stub.add_response(
        "describe_availability_zones",
        {
            "AvailabilityZones": [
                {"ZoneName": "us-east-1a", "ZoneId": "use1-az6"},
                {"ZoneName": "us-east-1b", "ZoneId": "use1-az1"},
            ]
        },
    )
    stub.add_response(
        "get_spot_placement_scores",
        {
            "SpotPlacementScores": [
                {"Region": REGION, "AvailabilityZoneId": "use1-az6", "Score": 9},
                {"Region": REGION, "AvailabilityZoneId": "use1-az1", "Score": 3},
            ]
        },
        {
            "InstanceTypes": ["p5.48xlarge"],
            "TargetCapacity": 2,
            "SingleAvailabilityZone": True,
            "RegionNames": [REGION],
        },
    )
    import datetime as dt

    t0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    stub.add_response(
        "describe_spot_price_history",
        {
            "SpotPriceHistory": [
                {"AvailabilityZone": "us-east-1a", "SpotPrice": "30.1", "Timestamp": t0},
                {"AvailabilityZone": "us-east-1a", "SpotPrice": "31.5", "Timestamp": t0 + dt.timedelta(minutes=5)},
                {"AvailabilityZone": "us-east-1c", "SpotPrice": "29.0", "Timestamp": t0},  # not asked for
            ]
        },
        {"InstanceTypes": ["p5.48xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY},
    )
    with stub:
        rows = cloud.signals(REGION, ["us-east-1a", "us-east-1b"], "p5.48xlarge", 2)
    assert [(r.zone, r.kind, r.value, r.count) for r in rows] == [
        ("us-east-1a", "placement_score", 9.0, 2),
        ("us-east-1b", "placement_score", 3.0, 2),
        ("us-east-1a", "spot_price", 31.5, 1),
    ]
    assert all(r.cloud == "aws" and r.region == REGION and r.instance_type == "p5.48xlarge" for r in rows)


def test_the_boot_script_refuses_credentials_and_runs_the_agent_on_the_store():
    script = boot_script(command=("python3", "train.py"), env={"A": "1"}, store_uri="s3://b/skynomad/j", run_id="tok")
    assert "--store s3://b/skynomad/j" in script and "-- python3 train.py" in script
    assert script.startswith("#!/bin/bash\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        with pytest.raises(UserDataError, match="credentials never go into user data"):
            boot_script(command=("x",), env={name: "secret"}, store_uri="s3://b/p/j", run_id="t")
    with pytest.raises(UserDataError, match="EC2 takes at most 16384"):
        boot_script(command=("x",), env={"BIG": "y" * 20000}, store_uri="s3://b/p/j", run_id="t")
    assert boot_script(command=(), env={}, store_uri="s3://b/p/j", run_id="t") == ""


@pytest.mark.parametrize(
    ("workload", "code", "outcome"), [("exit 0", 0, "finished"), ("echo boom >&2; exit 7", 1, "failed")]
)
def test_the_boot_script_runs_the_agent_locally_and_powers_off(tmp_path, workload, code, outcome):
    import json
    import os
    import subprocess

    from tests.support import metadata_stub

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "shutdown").write_text(f"#!/bin/bash\ntouch {tmp_path}/powered-off\n")
    (bin_dir / "shutdown").chmod(0o755)
    store = tmp_path / "store"
    script = boot_script(
        command=("bash", "-c", workload),
        env={"QUOTED": "it's fine"},
        store_uri=f"file://{store}",
        run_id="tok",
        python=sys.executable,
        work_dir=str(tmp_path / "disk"),
    )
    stub = metadata_stub.MetadataStub().start()
    try:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SKYNOMAD_IMDS_ENDPOINT": stub.url}
        done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    finally:
        stub.stop()
    assert done.returncode == code, done.stderr
    assert (tmp_path / "powered-off").exists()  # exit 0 and 1 power off; only 3 (preempted) waits for EC2
    record = json.loads((store / "runs" / "tok.json").read_text())
    assert record["outcome"] == outcome
    assert (tmp_path / "disk" / "tok" / "rank-0").is_dir()

"""Issue 31, break 7: what a request probe that died leaves (its EC2 Fleet and launch template) is found
and ended by `skynomad cleanup`, and nothing else is: another deployment's, untagged, or of another
purpose. The command is run as a user runs it, against moto."""

from __future__ import annotations

import contextlib
import json

import boto3
import pytest

moto = pytest.importorskip("moto")

from airflow_provider_skynomad.cli import main  # noqa: E402
from tests.support.aws_fixtures import BUCKET, FleetEvents, account  # noqa: E402

REGION, ZONE = "us-east-1", "us-east-1a"


@pytest.fixture
def acct(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": REGION,
        "AIRFLOW_CONN_AWS_DEFAULT": "aws://",
    }.items():
        monkeypatch.setenv(key, value)
    with moto.mock_aws():
        made = account({REGION: [ZONE]})
        extra = {"deployment_id": "prod", "checkpoint_bucket": BUCKET, **made.cloud_options()}
        monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad_aws", "extra": extra}))
        import airflow.utils.session

        # No job resources here: the lookup asks Airflow about no task instance.
        monkeypatch.setattr(airflow.utils.session, "create_session", contextlib.nullcontext)
        FleetEvents(monkeypatch)
        yield made


def crashed_probe(acct, deployment: str, purpose: str | None = "probe") -> tuple[str, str]:
    """What a request probe has made when its process dies before its delete: a template and a fleet
    (made by the probe's own code), tagged as the probe tags them."""
    from airflow_provider_skynomad.clouds.aws import probe
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud

    cloud = AwsCloud(deployment_id=deployment, **acct.cloud_options())
    client = boto3.client("ec2", region_name=REGION)
    tags = {"skynomad-deployment": deployment, probe.PROBE_ID_TAG: f"probe-{deployment}-{purpose}"}
    if purpose:
        tags["skynomad:purpose"] = purpose
    template = probe._create_template(cloud, client, REGION, tags[probe.PROBE_ID_TAG], tags)
    args = probe._fleet_args(cloud, ZONE, "g4dn.xlarge", 1, template, tags, tags[probe.PROBE_ID_TAG])
    return client.create_fleet(**args)["FleetId"], template


def live_fleets() -> set[str]:
    fleets = boto3.client("ec2", region_name=REGION).describe_fleets()["Fleets"]
    return {f["FleetId"] for f in fleets if f["FleetState"] == "active"}


def templates() -> set[str]:
    return {
        t["LaunchTemplateId"]
        for t in boto3.client("ec2", region_name=REGION).describe_launch_templates()["LaunchTemplates"]
    }


def test_break_7_cleanup_ends_a_crashed_probes_fleet_and_template_and_nothing_else(acct, capsys):
    ours = crashed_probe(acct, "prod")
    others = {
        "staging's probe": crashed_probe(acct, "staging"),
        "prod, purpose web": crashed_probe(acct, "prod", purpose="web"),
        "prod, no purpose": crashed_probe(acct, "prod", purpose=None),
    }
    client = boto3.client("ec2", region_name=REGION)
    untagged_template = client.create_launch_template(
        LaunchTemplateName="someone-elses", LaunchTemplateData={"ImageId": acct.images[REGION]}
    )["LaunchTemplate"]["LaunchTemplateId"]
    untagged_fleet = client.create_fleet(
        Type="request",
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": untagged_template, "Version": "$Latest"},
                "Overrides": [{"InstanceType": "g4dn.xlarge", "AvailabilityZone": ZONE}],
            }
        ],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
    )["FleetId"]

    assert main(["cleanup", "--dry-run"]) == 0
    out = capsys.readouterr().out
    would_end = [line for line in out.splitlines() if line.startswith("would end")]
    assert any(f"aws fleet {ours[0]} in {REGION}: left by a probe" in line for line in would_end), out
    assert any(f"aws launch template {ours[1]} in {REGION}: left by a probe" in line for line in would_end), out
    for fleet, template in others.values():
        assert not any(fleet in line or template in line for line in would_end), out
    assert not any(untagged_fleet in line or untagged_template in line for line in out.splitlines()), out
    assert {ours[0], untagged_fleet} | {f for f, _ in others.values()} <= live_fleets()  # a dry run ends nothing

    assert main(["cleanup"]) == 0
    capsys.readouterr()
    assert ours[0] not in live_fleets() and ours[1] not in templates()
    assert {untagged_fleet} | {f for f, _ in others.values()} <= live_fleets()
    assert {untagged_template, acct.templates[REGION]} | {t for _, t in others.values()} <= templates()

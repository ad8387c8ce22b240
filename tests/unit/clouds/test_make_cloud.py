"""make_cloud: `cloud_options` are checked against the cloud's constructor, once, for every cloud."""

from __future__ import annotations

import os
import tempfile

import pytest

# The hook module imports airflow, which reads its configuration on import: keep it out of ~/airflow
# when this file runs on its own (tests/support/airflow_env.py sets a throwaway home when it runs first).
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="skynomad-make-cloud-"))

from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadConfigError, make_cloud  # noqa: E402


def config(cloud: str, tmp_path, **options) -> SkyNomadConfig:
    return SkyNomadConfig(
        market_url=f"sqlite:///{tmp_path / 'market.db'}",
        cloud=cloud,
        state_dir=str(tmp_path / "cloud"),
        cloud_options=options,
    )


@pytest.mark.parametrize(
    ("cloud", "accepted"),
    [
        ("simulated", ["trace_start", "preemption_notice_seconds", "egress_usd_per_gb", "state_url", "deployment_id"]),
        (
            "aws",
            [
                "launch_template",
                "launch_template_version",
                "image_id",
                "subnets",
                "security_group_ids",
                "instance_profile",
                "checkpoint_prefix",
                "regions",
                "agent_python",
                "agent_work_dir",
                "setup_commands",
                "price_table",
                "probe_targets",
                "probe_kind",
                "deployment_id",
            ],
        ),
        (
            "gcp",
            [
                "source_instance_template",
                "image",
                "network",
                "subnetwork",
                "service_account",
                "boot_disk_gb",
                "checkpoint_bucket",
                "checkpoint_prefix",
                "python",
                "work_dir",
                "power_off_command",
                "spot_usd_per_hour",
                "price_table",
                "regions",
                "hook",
                "gcs_hook",
                "probe_targets",
                "probe_kind",
                "deployment_id",
            ],
        ),
    ],
)
def test_an_unknown_cloud_option_is_refused_naming_it_and_the_accepted_ones(cloud, accepted, tmp_path):
    with pytest.raises(SkyNomadConfigError, match=f"the {cloud} cloud does not accept cloud_options 'imgae_id'") as err:
        make_cloud(config(cloud, tmp_path, imgae_id="ami-1"))
    listed = str(err.value).split("accepted: ", 1)[1].split(", ")
    assert listed == accepted
    assert not (tmp_path / "cloud").exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("cloud", "option", "field"),
    [("simulated", "speed", "speed"), ("aws", "aws_conn_id", "aws_conn_id"), ("gcp", "project_id", "gcp_project")],
)
def test_an_option_the_connection_sets_itself_points_at_its_field(cloud, option, field, tmp_path):
    with pytest.raises(
        SkyNomadConfigError, match=f"cloud_options.{option} is set by the connection's own field '{field}'"
    ):
        make_cloud(config(cloud, tmp_path, **{option: "x"}))


def test_accepted_options_reach_the_constructor(tmp_path):
    simulated = make_cloud(config("simulated", tmp_path, trace_start=2.0, preemption_notice_seconds=10))
    assert simulated.preemption_notice_seconds == 10.0
    assert (
        simulated.to_config()["trace_start"]
        != make_cloud(config("simulated", tmp_path / "b")).to_config()["trace_start"]
    )
    targets = [{"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"], "instance_type": "p5.48xlarge"}]
    aws = make_cloud(config("aws", tmp_path, image_id={"us-east-1": "ami-1"}, probe_targets=targets))
    assert (aws.image_id, aws.probe_targets, aws.aws_conn_id) == ({"us-east-1": "ami-1"}, targets, "aws_default")
    gcp = make_cloud(config("gcp", tmp_path, source_instance_template="global/instanceTemplates/h100"))
    assert gcp.source_instance_template == "global/instanceTemplates/h100"


def test_the_probe_kind_setting_is_checked_when_the_cloud_is_made(tmp_path):
    # GCP probes by request too since its request probes (clouds/gcp/probe.py): a kind no cloud has is refused
    with pytest.raises(ValueError, match="the gcp cloud cannot probe by 'offer'"):
        make_cloud(config("gcp", tmp_path, probe_kind="offer"))

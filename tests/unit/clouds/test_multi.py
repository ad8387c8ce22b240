"""MultiCloud: every call reaches the cloud that owns the zone or the group."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.clouds.base import Cloud, GroupHandle, GroupStatus, LaunchRequest, ProbeResult
from airflow_provider_skynomad.clouds.multi import MultiCloud
from airflow_provider_skynomad.clouds.zones import cloud_of_zone


@pytest.mark.parametrize(
    ("zone", "cloud"),
    [
        ("us-east-1a", "aws"),
        ("ap-southeast-2c", "aws"),
        ("us-gov-west-1a", "aws"),
        ("us-central1-a", "gcp"),
        ("europe-west4-b", "gcp"),
        ("asia-southeast1-c", "gcp"),
    ],
)
def test_zone_names_tell_their_cloud(zone, cloud):
    assert cloud_of_zone(zone) == cloud


def test_a_zone_name_of_neither_cloud_is_refused():
    with pytest.raises(ValueError, match="neither an AWS zone"):
        cloud_of_zone("eastus2")


class Recording(Cloud):
    def __init__(self, name, problems=()):
        self.name = name
        self.calls = []
        self.problems = list(problems)

    def _handle(self, zone):
        return GroupHandle(self.name, zone, ("i-1",), True, "tok", job_id="job")

    def find(self, client_token):
        self.calls.append(("find", client_token))
        return self._handle("us-east-1a") if self.name == "aws" and client_token == "tok" else None

    def launch(self, request):
        self.calls.append(("launch", request.zone))
        return self._handle(request.zone)

    def poll(self, handle):
        self.calls.append(("poll", handle.zone))
        return GroupStatus.RUNNING

    def terminate(self, handle):
        self.calls.append(("terminate", handle.zone))

    def progress(self, handle):
        self.calls.append(("progress", handle.zone))
        return 0.5

    def probe(self, region, zone, instance_type, count, *, tags=None, kind="launch"):
        self.calls.append(("probe", zone, kind))
        return ProbeResult(zone, instance_type, count, count, 1.0, 3.0, usd=0.02)

    def copy_checkpoint(self, source_zone, target_zone, size_gb, *, job_id, tags=None):
        self.calls.append(("copy", source_zone, target_zone))
        return True

    def check(self, zones=None, instance_type=None):
        self.calls.append(("check", tuple(zones or ())))
        return list(self.problems)


def multi(aws_problems=(), gcp_problems=()):
    aws, gcp = Recording("aws", aws_problems), Recording("gcp", gcp_problems)
    return MultiCloud({"aws": aws, "gcp": gcp}), aws, gcp


def test_launch_poll_progress_and_terminate_go_to_the_groups_cloud():
    cloud, aws, gcp = multi()
    request = LaunchRequest("gcp", "us-central1", "us-central1-a", "a3-highgpu-1g", 1, True, "t2", job_id="job")
    handle = cloud.launch(request)
    assert handle.cloud == "gcp"
    assert cloud.poll(handle) is GroupStatus.RUNNING and cloud.progress(handle) == 0.5
    cloud.terminate(handle)
    assert [c[0] for c in gcp.calls] == ["launch", "poll", "progress", "terminate"]
    assert aws.calls == []


def test_find_asks_each_cloud_until_one_knows_the_token():
    cloud, aws, gcp = multi()
    assert cloud.find("tok").cloud == "aws"
    assert cloud.find("other") is None
    assert ("find", "other") in aws.calls and ("find", "other") in gcp.calls


def test_probes_and_copies_within_one_cloud_go_to_that_cloud():
    cloud, aws, gcp = multi()
    assert cloud.probe("us-east-1", "us-east-1a", "p5.48xlarge", 1).usd == 0.02
    assert cloud.probe("us-east-1", "us-east-1a", "p5.48xlarge", 1, kind="request").usd == 0.02
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 10, job_id="job")
    assert aws.calls == [("probe", "us-east-1a", "launch"), ("probe", "us-east-1a", "request")]
    assert gcp.calls == [("copy", "us-central1-a", "europe-west4-b")]


def test_a_copy_across_clouds_without_stores_restarts_honestly():
    cloud, aws, gcp = multi()
    assert cloud.copy_checkpoint("us-east-1a", "us-central1-a", 10, job_id="job") is False
    assert aws.calls == [] and gcp.calls == []


def test_check_asks_each_cloud_about_its_own_zones_and_names_a_cloud_that_is_missing():
    cloud, aws, gcp = multi(gcp_problems=["cloud_options.source_instance_template has no template for europe-west4"])
    problems = cloud.check(["us-east-1a", "europe-west4-b"], "x")
    assert aws.calls == [("check", ("us-east-1a",))] and gcp.calls == [("check", ("europe-west4-b",))]
    assert problems == ["cloud_options.source_instance_template has no template for europe-west4"]
    only_aws = MultiCloud({"aws": Recording("aws")})
    (problem,) = only_aws.check(["us-central1-a"])
    assert "us-central1-a are gcp zones, but this connection has no gcp cloud" in problem


def test_a_copy_across_clouds_moves_the_newest_complete_checkpoint_between_their_stores(tmp_path):
    from airflow_provider_skynomad.agent.snapshot import hash_all
    from airflow_provider_skynomad.agent.store import CheckpointStore

    cloud, aws, gcp = multi()
    stores = {"aws": (tmp_path / "s3").as_uri(), "gcp": (tmp_path / "gcs").as_uri()}
    for part in (aws, gcp):
        part.checkpoint_store = lambda job_id, zone, name=part.name: CheckpointStore(f"{stores[name]}/{job_id}")
    assert cloud.copy_checkpoint("us-east-1a", "us-central1-a", 1, job_id="job") is False  # nothing yet

    work = tmp_path / "work"
    work.mkdir()
    (work / "weights.bin").write_bytes(b"\x00\x01" * 1000)
    source = CheckpointStore(f"{stores['aws']}/job")
    source.upload_checkpoint(work, hash_all(work), 7, 10)
    (work / "weights.bin").write_bytes(b"half-written")  # files without a manifest never count
    (tmp_path / "s3" / "job" / "checkpoints" / "0000000002" / "files").mkdir(parents=True)

    assert cloud.copy_checkpoint("us-east-1a", "us-central1-a", 1, job_id="job") is True
    target = CheckpointStore(f"{stores['gcp']}/job")
    restored = tmp_path / "restored"
    manifest = target.restore(restored, tmp_path)
    assert manifest["step"] == 7 and manifest["total_steps"] == 10
    assert (restored / "weights.bin").read_bytes() == b"\x00\x01" * 1000
    assert target.read_progress()["step"] == 7
    assert aws.calls == [] and gcp.calls == []  # neither cloud's own copy was asked


def test_each_cloud_names_the_zones_it_cannot_use_from_its_settings_alone():
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from airflow_provider_skynomad.clouds.gcp.cloud import GcpCloud

    aws = AwsCloud(subnets={"us-east-1a": "subnet-1"})
    gcp = GcpCloud(project_id="p", source_instance_template={"us-central1": "tpl"})
    zones = ["us-east-1a", "us-east-1b", "us-central1-a", "europe-west4-a", "ζ" * 300]
    assert sorted(aws.unusable_zones(zones)) == ["europe-west4-a", "us-central1-a", "us-east-1b", "ζ" * 300]
    assert "no subnet" in aws.unusable_zones(zones)["us-east-1b"]
    assert sorted(gcp.unusable_zones(zones)) == ["europe-west4-a", "us-east-1a", "us-east-1b", "ζ" * 300]
    assert "configured regions (us-central1)" in gcp.unusable_zones(zones)["europe-west4-a"]
    multi = MultiCloud({"gcp": gcp})
    said = multi.unusable_zones(zones)
    assert sorted(said) == ["europe-west4-a", "us-east-1a", "us-east-1b", "ζ" * 300]
    assert "no aws cloud" in said["us-east-1a"] and "neither" in said["ζ" * 300]

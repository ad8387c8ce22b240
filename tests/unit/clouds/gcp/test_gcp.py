"""GcpCloud against a fake Compute Engine at the adapter boundary and the GCS emulator on localhost.

Request bodies are checked field by field; checkpoints, progress and run records are real
objects in the emulator, laid out as the workload agent writes them (docs/agent.md).
"""

from __future__ import annotations

import json
import shlex
import uuid
from collections import Counter

import pytest

from airflow_provider_skynomad.clouds.base import CapacityError, GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.gcp.cloud import GcpCloud
from tests.support.gcp_fakes import EmulatorGcsHook, FakeCompute, FakeGceHook, anonymous_storage_client, gcs_emulator

BUCKETS = ("ckpt-us-central1", "ckpt-europe-west4", "ckpt-multi")
TAGS = {
    "skynomad-job": "SN-Job_1",
    "skynomad-dag": "My.DAG",
    "skynomad-run": "manual__2026-12-01T12:00:00+00:00",
    "skynomad-task": "fine_tune",
    "skynomad-try": "1",
}


@pytest.fixture(scope="module")
def emulator():
    with gcs_emulator(BUCKETS) as url:
        yield url


@pytest.fixture
def compute():
    fake = FakeCompute()
    fake.templates |= {"gpu-us"}
    fake.region_templates |= {("europe-west4", "gpu-eu")}
    return fake


SECRET = "deployment-signing-secret-0123456789"  # the connection's checkpoint_signing_secret


def make_cloud(compute, bucket="ckpt-{region}", **options):
    options = {
        "checkpoint_signing_secret": SECRET,
        "source_instance_template": {
            "us-central1": "gpu-us",
            "europe-west4": "projects/proj/regions/europe-west4/instanceTemplates/gpu-eu",
        },
        **options,
    }
    return GcpCloud(
        project_id="proj",
        checkpoint_bucket=bucket,
        hook=FakeGceHook(compute),
        gcs_hook=EmulatorGcsHook(),
        spot_usd_per_hour={"a3-highgpu-1g": 2.4},
        **options,
    )


def request(token="sn-ABC_1", spot=True, count=2, zone="us-central1-a", job_id=None, **kw):
    return LaunchRequest(
        "gcp",
        zone.rsplit("-", 1)[0],
        zone,
        "a3-highgpu-1g",
        count,
        spot,
        token,
        command=("python3", "-m", "train", "--steps", "20"),
        tags=TAGS,
        job_id=job_id or f"job-{uuid.uuid4().hex[:8]}",
        **kw,
    )


def items_of(insert: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in insert["instance_resource"]["metadata"]["items"]}


def put(path: str, data, bucket="ckpt-us-central1"):
    blob = anonymous_storage_client().bucket(bucket).blob(path)
    blob.upload_from_string(data if isinstance(data, bytes) else json.dumps(data))


def write_checkpoint(job_id: str, seq: int, step: int, total: int = 20, bucket="ckpt-us-central1", manifest=True):
    """A checkpoint as the job's agent writes it: files, then its manifest and progress.json, signed."""
    from airflow_provider_skynomad.agent.signing import PROGRESS_CLAIM, derive_job_key, sign, sign_claim

    base = f"skynomad/{job_id}/checkpoints/{seq:010d}"
    weights = f"weights {step}".encode()
    put(f"{base}/files/checkpoint.pkl", weights, bucket)
    if manifest:
        key = derive_job_key(SECRET, job_id)
        files = [{"path": "checkpoint.pkl", "size": len(weights), "sha256": "x"}]
        manifest = {"format": 1, "seq": seq, "step": step, "total_steps": total, "files": files}
        put(f"{base}/MANIFEST.json", sign(manifest, key), bucket)
        progress = {"step": step, "total_steps": total, "seq": seq}
        put(f"skynomad/{job_id}/progress.json", sign_claim(progress, key, PROGRESS_CLAIM), bucket)


def put_run(job_id: str, run_id: str, record: dict) -> None:
    """A run record as the job's agent writes it (signed with the job's key)."""
    from airflow_provider_skynomad.agent.signing import RUN_CLAIM, derive_job_key, sign_claim

    signed = sign_claim({**record, "run_id": run_id}, derive_job_key(SECRET, job_id), RUN_CLAIM)
    put(f"skynomad/{job_id}/runs/{run_id}.json", signed)


def test_spot_insert_body_field_by_field(compute, emulator):
    cloud = make_cloud(compute)
    req = request()
    handle = cloud.launch(req)
    assert handle.instance_ids == ("sn-abc-1-0", "sn-abc-1-1") and handle.region == "us-central1"
    assert len(compute.inserts) == 2
    for rank, insert in enumerate(compute.inserts):
        body = insert["instance_resource"]
        assert insert["project"] == "proj" and insert["zone"] == "us-central1-a"
        assert insert["source_instance_template"] == "global/instanceTemplates/gpu-us"
        assert insert["request_id"] == str(uuid.uuid5(uuid.NAMESPACE_URL, f"sn-ABC_1/{rank}"))
        assert uuid.UUID(insert["request_id"]).version == 5  # RFC 4122, as Compute Engine requires
        assert body["name"] == f"sn-abc-1-{rank}"
        assert body["machine_type"] == "zones/us-central1-a/machineTypes/a3-highgpu-1g"
        assert body["scheduling"]["provisioning_model"] == "SPOT"
        assert body["scheduling"]["instance_termination_action"] == "DELETE"
        assert body["scheduling"]["automatic_restart"] is False
        labels = body["labels"]
        assert labels["skynomad-job"] == "sn-job_1"
        assert labels["skynomad-dag"] == "my-dag"
        assert labels["skynomad-run"] == "manual__2026-12-01t12-00-00-00-00"
        assert labels["skynomad-task"] == "fine_tune" and labels["skynomad-try"] == "1"
        assert labels["skynomad-client-token"] == "sn-abc_1" and labels["skynomad-rank"] == str(rank)
        assert labels["skynomad-gang-size"] == "2" and labels["skynomad-managed"] == "true"
        for key, value in labels.items():  # GCP: lowercase letters, digits, _ and -; keys start with a letter
            assert len(key) <= 63 and len(value) <= 63 and key[0].isalpha()
            assert all(c.islower() or c.isdigit() or c in "_-" for c in key + value)
        assert "disks" not in body and "network_interfaces" not in body  # the template's
    items = items_of(compute.inserts[1])
    assert items["skynomad-client-token"] == "sn-ABC_1" and items["skynomad-job-id"] == req.job_id
    script = items["startup-script"]
    agent_line = next(line for line in script.splitlines() if "airflow_provider_skynomad.agent" in line)
    key_assignment, *agent_words = shlex.split(agent_line)  # the job's key, for the agent only (signed by default)
    assert key_assignment.startswith("SKYNOMAD_CHECKPOINT_KEY=")
    assert agent_words == [
        "python3",
        "-m",
        "airflow_provider_skynomad.agent",
        "run",
        "--store",
        f"gs://ckpt-us-central1/skynomad/{req.job_id}",
        "--work-dir",
        "/var/tmp/skynomad/sn-abc-1-1",
        "--run-id",
        "sn-ABC_1-1",
        "--notice",
        "gcp",
        "--rank",
        "1",
        "--",
        "python3",
        "-m",
        "train",
        "--steps",
        "20",
    ]
    assert 'if [ "$code" != 3 ]; then shutdown -h now; fi' in script


def test_metadata_holds_no_credentials(compute, emulator, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/secret/key.json")
    cloud = make_cloud(compute)
    cloud.launch(request(count=1, env={"MODEL": "llama"}))
    metadata = json.dumps(compute.inserts[0]["instance_resource"]["metadata"])
    for secret in ("GOOGLE_APPLICATION_CREDENTIALS", "/secret/key.json", "private_key", "access_token", "password"):
        assert secret not in metadata
    assert "export MODEL=llama" in metadata
    with pytest.raises(ValueError, match="HF_TOKEN looks like a credential"):
        cloud.launch(request(token="sn-2", count=1, env={"HF_TOKEN": "hf_xyz"}))
    assert len(compute.inserts) == 1  # refused before anything was sent


def test_regional_template_and_image_launch_per_region(compute, emulator):
    cloud = make_cloud(compute)
    cloud.launch(request(zone="europe-west4-b", count=1))
    assert compute.inserts[-1]["source_instance_template"] == (
        "projects/proj/regions/europe-west4/instanceTemplates/gpu-eu"
    )
    images = make_cloud(
        compute,
        source_instance_template=None,
        image="projects/deeplearning-platform-release/global/images/family/common-cu124",
        subnetwork={"us-central1": "regions/us-central1/subnetworks/gpu"},
        service_account="skynomad-vm@proj.iam.gserviceaccount.com",
        boot_disk_gb=300,
    )
    images.launch(request(token="sn-img", spot=False, count=1))
    insert = compute.inserts[-1]
    body = insert["instance_resource"]
    assert insert["source_instance_template"] is None and "scheduling" not in body  # on-demand: standard VM
    (disk,) = body["disks"]
    assert disk["boot"] and disk["auto_delete"]
    assert disk["initialize_params"] == {
        "source_image": "projects/deeplearning-platform-release/global/images/family/common-cu124",
        "disk_size_gb": 300,
    }
    assert body["network_interfaces"][0]["subnetwork"] == "regions/us-central1/subnetworks/gpu"
    assert body["service_accounts"] == [
        {
            "email": "skynomad-vm@proj.iam.gserviceaccount.com",
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
    ]
    with pytest.raises(ValueError, match="cloud_options.subnetwork has no subnetwork for region europe-west4"):
        images.launch(request(token="sn-img2", zone="europe-west4-b", count=1))


def test_retry_resends_the_same_request_ids_and_creates_nothing_twice(compute, emulator):
    cloud = make_cloud(compute)
    failures = iter([RuntimeError("503 connection reset")])
    real_insert = compute.insert

    def flaky(request, **kw):  # the second member's insert reaches Compute Engine, the answer is lost
        op = real_insert(request, **kw)
        if request["instance_resource"]["name"].endswith("-1"):
            error = next(failures, None)
            if error:
                raise error
        return op

    compute.client("InstancesClient")  # the hook asks for the client on every call: patch the method
    compute.insert = flaky
    with pytest.raises(RuntimeError, match="connection reset"):
        cloud.launch(request(job_id="job-retry"))
    assert len(compute.created) == 2  # both exist: the lost answer was for a done insert
    handle = cloud.launch(request(job_id="job-retry"))  # the task's retry: same token
    assert len(compute.created) == 2 and len(compute.inserts) == 2  # found by label: nothing re-sent
    assert cloud.find("sn-ABC_1") == handle
    # Compute Engine's own idempotency: the same insert re-sent with its request_id creates nothing
    compute.remove("us-central1-a", "sn-abc-1-1")
    again = dict(compute.inserts[1])
    compute.insert(again)
    assert ("us-central1-a", "sn-abc-1-1") not in compute.instances and len(compute.created) == 2


def test_stockout_deletes_the_whole_gang(compute, emulator):
    cloud = make_cloud(compute)
    compute.capacity["us-central1-a"] = 1
    with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        cloud.launch(request(count=2))
    assert compute.instances == {} and len(compute.created) == 1


def test_poll_tells_preemption_from_failure_and_finish(compute, emulator):
    cloud = make_cloud(compute)
    handle = cloud.launch(request(count=2))
    assert cloud.poll(handle) is GroupStatus.RUNNING
    before = Counter(compute.calls)
    cloud.poll(handle)
    assert compute.calls - before == {"instances.list": 1}  # one call
    compute.preempt("us-central1-a", "sn-abc-1-1")  # stopped, operation logged, no run record yet
    assert cloud.poll(handle) is GroupStatus.PREEMPTED
    compute.remove("us-central1-a", "sn-abc-1-1")  # deleted (termination action DELETE)
    assert cloud.poll(handle) is GroupStatus.PREEMPTED

    # a spot VM gone without a preemption operation, but the agent saw the notice
    other = cloud.launch(request(token="sn-3", count=1, job_id="job-notice"))
    compute.remove("us-central1-a", "sn-3-0")
    assert cloud.poll(other) is GroupStatus.TERMINATED
    put_run("job-notice", "sn-3", {"outcome": "preempted", "exit_code": 3, "stderr_tail": []})
    assert cloud.poll(other) is GroupStatus.PREEMPTED

    # powered off after a failure: FAILED with the workload's stderr tail; a clean finish: SUCCEEDED
    failed = cloud.launch(request(token="sn-4", count=1, spot=False, job_id="job-fail"))
    compute.set_status("us-central1-a", "sn-4-0", "TERMINATED")
    tail = ["Traceback (most recent call last):", "ValueError: bad learning rate"]
    put_run("job-fail", "sn-4", {"outcome": "failed", "exit_code": 1, "stderr_tail": tail})
    assert cloud.poll(failed) is GroupStatus.FAILED
    assert cloud.failure_detail(failed).endswith("ValueError: bad learning rate")
    done = cloud.launch(request(token="sn-5", count=1, job_id="job-done"))
    compute.set_status("us-central1-a", "sn-5-0", "STOPPING")
    put_run("job-done", "sn-5", {"outcome": "finished", "exit_code": 0, "stderr_tail": []})
    assert cloud.poll(done) is GroupStatus.SUCCEEDED
    assert cloud.output_location("job-done", "us-central1-a") == "gs://ckpt-us-central1/skynomad/job-done/output"


def test_progress_is_dated_by_when_the_agent_wrote_it_and_the_date_is_signed(compute, emulator):
    """The pace dates a checkpoint by progress.json's `updated_at` (jobs/watch.py), so it is read on the
    cloud's clock, and a date changed after signing makes the progress count for nothing."""
    import time

    from airflow_provider_skynomad.agent.store import now_iso

    cloud = make_cloud(compute)
    handle = cloud.launch(request(count=1, job_id="job-dated"))
    written = time.time() - 600.0
    store = cloud.store.checkpoints("ckpt-us-central1", "job-dated")
    store.write_progress({"step": 2, "total_steps": 8, "seq": 1, "created_at": now_iso(written)})
    done = cloud.progress(handle)
    assert done == pytest.approx(0.25)
    assert done.at_hours == pytest.approx(cloud.hours_at_wall(written), abs=1e-6) and done.at_hours < cloud.now_hours()
    blob = anonymous_storage_client().bucket("ckpt-us-central1").blob("skynomad/job-dated/progress.json")
    claim = json.loads(blob.download_as_bytes())
    put("skynomad/job-dated/progress.json", {**claim, "updated_at": now_iso()})
    assert cloud.progress(handle) is None


def test_progress_and_checkpoint_copy_across_regional_buckets(compute, emulator):
    cloud = make_cloud(compute)
    handle = cloud.launch(request(count=1, job_id="job-copy"))
    assert cloud.progress(handle) is None
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id="job-copy") is False
    write_checkpoint("job-copy", 1, 4)
    write_checkpoint("job-copy", 2, 8)
    write_checkpoint("job-copy", 3, 12, manifest=False)  # half uploaded: never counts
    assert cloud.progress(handle) == pytest.approx(0.4)
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id="job-copy") is True
    copied = sorted(
        b.name for b in anonymous_storage_client().list_blobs("ckpt-europe-west4", prefix="skynomad/job-copy")
    )
    assert copied == [
        "skynomad/job-copy/checkpoints/0000000002/MANIFEST.json",
        "skynomad/job-copy/checkpoints/0000000002/files/checkpoint.pkl",
        "skynomad/job-copy/progress.json",
    ]
    moved = cloud.launch(request(token="sn-eu", zone="europe-west4-b", count=1, job_id="job-copy"))
    assert cloud.progress(moved) == pytest.approx(0.4)


def test_checkpoint_store_opens_the_jobs_regional_prefix_with_the_hooks_client(compute, emulator):
    cloud = make_cloud(compute)
    write_checkpoint("job-store", 1, 4)
    write_checkpoint("job-store", 2, 6, manifest=False)
    store = cloud.checkpoint_store("job-store", "us-central1-b")
    assert store.uri == "gs://ckpt-us-central1/skynomad/job-store"
    assert store.complete_seqs() == [1]  # the half-uploaded one does not count
    assert store.read_progress()["step"] == 4
    assert cloud.checkpoint_store("job-store", "europe-west4-b").complete_seqs() == []


def test_one_multi_region_bucket_copies_nothing(compute, emulator):
    cloud = make_cloud(compute, bucket="ckpt-multi")
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id="job-multi") is False
    write_checkpoint("job-multi", 1, 5, bucket="ckpt-multi")
    before = sorted(b.name for b in anonymous_storage_client().list_blobs("ckpt-multi"))
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id="job-multi") is True
    assert sorted(b.name for b in anonymous_storage_client().list_blobs("ckpt-multi")) == before


def test_probe_costs_the_granted_vms_one_minute_each(compute, emulator):
    cloud = make_cloud(compute)
    compute.capacity["us-central1-a"] = 2
    result = cloud.probe("us-central1", "us-central1-a", "a3-highgpu-1g", 3, tags={"skynomad-job": "j"})
    assert (result.requested, result.available) == (3, 2)
    assert result.usd == pytest.approx(2 * 2.4 / 60)
    assert result.on_demand_usd_per_hour == pytest.approx(10.3157)  # the shipped price table's us-central1 row
    assert compute.instances == {}  # released at once
    labels = compute.inserts[0]["instance_resource"]["labels"]
    assert labels["skynomad-purpose"] == "probe" and labels["skynomad-job"] == "j"
    assert items_of(compute.inserts[0])["startup-script"] == ""  # a probe runs nothing
    assert (result.kind, result.billed_instances) == ("launch", 2)  # every VM that started is billed
    compute.capacity["us-central1-a"] = 0
    stocked_out = cloud.probe("us-central1", "us-central1-a", "a3-highgpu-1g", 1)
    assert (stocked_out.available, stocked_out.usd) == (0, 0.0)  # a failed insert started nothing


# -- request probes: insert, watch the status, delete at STAGING ---------------------------------


def request_probe(cloud, zone="us-central1-a", count=1, **kw):
    return cloud.probe(zone.rsplit("-", 1)[0], zone, "a3-highgpu-1g", count, tags={"skynomad-job": "j"}, kind="request")


def test_a_request_probe_deletes_at_staging_and_is_billed_nothing(compute, emulator):
    cloud = make_cloud(compute)
    compute.boot_statuses["us-central1-a"] = ["PROVISIONING", "STAGING", "RUNNING"]
    result = request_probe(cloud, count=2)
    assert (result.kind, result.requested, result.available, result.billed, result.usd) == ("request", 2, 2, 0, 0.0)
    assert compute.deleted_statuses == ["STAGING", "STAGING"]  # deleted before it ran
    assert compute.instances == {}
    labels = compute.inserts[0]["instance_resource"]["labels"]
    assert labels["skynomad-purpose"] == "probe" and labels["skynomad-job"] == "j"
    assert items_of(compute.inserts[0])["startup-script"] == ""  # a probe runs nothing


def test_a_request_probe_that_read_running_first_is_billed_a_minute(compute, emulator):
    cloud = make_cloud(compute)  # the fake's VMs are RUNNING at the first read: the race lost
    result = request_probe(cloud)
    assert (result.available, result.billed) == (1, 1)
    assert result.usd == pytest.approx(2.4 / 60)
    assert compute.deleted_statuses == ["RUNNING"] and compute.instances == {}


def test_a_stock_out_is_zero_seen_and_free(compute, emulator):
    cloud = make_cloud(compute)
    compute.capacity["us-central1-a"] = 1
    compute.boot_statuses["us-central1-a"] = ["PROVISIONING", "STAGING"]
    result = request_probe(cloud, count=3)
    assert (result.available, result.billed, result.usd) == (1, 0, 0.0)
    assert len(compute.inserts) == 2  # the stock-out ends the probe; it created nothing
    compute.capacity["us-central1-a"] = 0
    assert (request_probe(cloud).available, compute.instances) == (0, {})


def test_a_request_probe_without_an_answer_fails_the_zone(compute, emulator):
    from airflow_provider_skynomad.clouds.gcp.probe import ProbeNoAnswer
    from airflow_provider_skynomad.clouds.gcp.probe import request_probe as gcp_request_probe

    cloud = make_cloud(compute)
    compute.silent_zones.add("us-central1-a")
    waited = []
    with pytest.raises(ProbeNoAnswer, match="neither allocated nor refused"):
        gcp_request_probe(
            cloud,
            "us-central1",
            "us-central1-a",
            "a3-highgpu-1g",
            1,
            {},
            wait_seconds=3,
            sleep=waited.append,
            clock=iter(range(100)).__next__,
        )
    assert waited == [1.0, 1.0]  # polled once a second until the bound
    assert compute.instances == {} and compute.calls["instances.delete"] == 1  # deleted in case it exists


def test_a_request_probe_stuck_in_provisioning_is_no_answer_and_deleted(compute, emulator):
    from airflow_provider_skynomad.clouds.gcp.probe import ProbeNoAnswer
    from airflow_provider_skynomad.clouds.gcp.probe import request_probe as gcp_request_probe

    cloud = make_cloud(compute)
    compute.boot_statuses["us-central1-a"] = ["PROVISIONING"] * 10
    with pytest.raises(ProbeNoAnswer, match="last status PROVISIONING"):
        gcp_request_probe(
            cloud,
            "us-central1",
            "us-central1-a",
            "a3-highgpu-1g",
            1,
            {},
            wait_seconds=2,
            sleep=lambda s: None,
            clock=iter(range(100)).__next__,
        )
    assert compute.deleted_statuses == ["PROVISIONING"] and compute.instances == {}


def test_check_names_the_setting_without_launching(compute, emulator):
    zones = ["us-central1-a", "europe-west4-b"]
    assert make_cloud(compute).check(zones, "a3-highgpu-1g") == []
    problems = make_cloud(compute, source_instance_template={"us-central1": "nope"}).check(zones)
    assert problems == [
        "cloud_options.source_instance_template has no template for region europe-west4 (nor cloud_options.image)",
        "cloud_options.source_instance_template: template 'nope' (region us-central1) does not exist in project proj",
    ]
    problems = make_cloud(compute, bucket="missing-{region}").check(["us-central1-a"])
    assert problems == [
        "cloud_options.checkpoint_bucket: bucket 'missing-us-central1' for region us-central1 does not exist"
    ]
    assert make_cloud(compute, bucket=None).check(["us-central1-a"]) == [
        "cloud_options.checkpoint_bucket is not set: the workload agent keeps the job's checkpoints there"
    ]
    compute.machine_types = {"a3-highgpu-8g"}
    assert make_cloud(compute).check(["us-central1-a"], "a3-highgpu-1g") == [
        "instance type a3-highgpu-1g is not offered in zone us-central1-a (the market table's instance_type)"
    ]
    compute.images |= {"deeplearning-platform-release/family/common-cu124"}
    image_cloud = make_cloud(
        compute,
        source_instance_template=None,
        image="projects/deeplearning-platform-release/global/images/family/common-cu124",
        subnetwork={"us-central1": "regions/us-central1/subnetworks/gpu"},
    )
    assert image_cloud.check(["us-central1-a"]) == [
        "cloud_options.subnetwork: 'regions/us-central1/subnetworks/gpu' (region us-central1) does not exist"
    ]
    compute.subnetworks.add(("us-central1", "gpu"))
    assert image_cloud.check(["us-central1-a"]) == []
    assert compute.inserts == []  # nothing was launched by any check

    class NoCredentials(FakeGceHook):
        def get_credentials(self):
            raise RuntimeError("File /nope.json was not found")

    hook = NoCredentials(compute)
    broken = GcpCloud(project_id="proj", checkpoint_bucket="ckpt-{region}", hook=hook, checkpoint_signing_secret=SECRET)
    (problem,) = broken.check(zones)
    assert problem.startswith("gcp_conn_id 'google_cloud_default': cannot get credentials (RuntimeError: File /nope")


def test_resources_and_release(compute, emulator):
    cloud = make_cloud(compute, regions=["us-central1", "europe-west4"])
    job = request(count=1, job_id="job-left")
    cloud.launch(job)
    write_checkpoint("job-left", 1, 3)
    found = cloud.resources({"skynomad-job": "SN-Job_1"})
    instances = [r for r in found if r.kind == "instance"]
    assert [(r.id, r.zone, r.job_id) for r in instances] == [("sn-abc-1-0", "us-central1-a", "job-left")]
    stores = [r for r in cloud.resources({"skynomad-job": "job-left"}) if r.kind == "checkpoint"]
    assert [(r.id, r.region) for r in stores] == [("gs://ckpt-us-central1/skynomad/job-left", "us-central1")]
    for resource in [*instances, *stores]:
        cloud.release(resource)
        cloud.release(resource)  # safe twice
    assert compute.instances == {}
    assert list(anonymous_storage_client().list_blobs("ckpt-us-central1", prefix="skynomad/job-left/")) == []


def test_with_a_signing_secret_each_job_gets_its_own_key_and_task_state_none(compute, emulator):
    from airflow_provider_skynomad.agent.signing import KEY_ENV, derive_job_key

    secret = "deployment-signing-secret-0123456789"
    cloud = make_cloud(compute, checkpoint_signing_secret=secret)
    sent = request("sn-KEY_1", job_id="job-k1")
    cloud.launch(sent)
    cloud.launch(request("sn-KEY_2", job_id="job-k2"))
    scripts = [items_of(insert)["startup-script"] for insert in compute.inserts]
    key_1, key_2 = derive_job_key(secret, "job-k1").hex(), derive_job_key(secret, "job-k2").hex()
    assert f"{KEY_ENV}={key_1} " in scripts[0] and key_2 not in scripts[0]
    assert f"{KEY_ENV}={key_2} " in scripts[-1] and key_1 not in scripts[-1]
    assert all(secret not in script for script in scripts)
    assert key_1 not in json.dumps(sent.to_dict())  # what task state keeps of a launch
    assert cloud.checkpoint_store("job-k1", "us-central1-a").key == derive_job_key(secret, "job-k1")
    unsigned = make_cloud(compute, checkpoint_signing_secret=None)
    with pytest.raises(ValueError, match="checkpoint_signing_secret is not set"):
        unsigned.launch(request("sn-KEY_3", job_id="job-k3"))  # signing is the default: no secret, no launch
    assert len(compute.inserts) == 4  # the two keyed launches' members only
    assert unsigned.checkpoint_store("job-k3", "us-central1-a").key is None


# -- what an instance writes is evidence, not truth (issue 31, breaks 4 and 5) --------------------


def staged_checkpoint(tmp_path, step: int, marker: bytes):
    from airflow_provider_skynomad.agent.snapshot import hash_all

    staged = tmp_path / f"staged-{step}-{marker.hex()}"
    staged.mkdir()
    (staged / "who").write_bytes(marker)
    return staged, hash_all(staged)


def forge_checkpoint(bucket: str, job_id: str, seq: int, key: bytes | None, step: int = 20) -> None:
    """A complete checkpoint `seq` at `step` of 20 planted in the job's prefix: unsigned, or signed with `key`."""
    import hashlib

    from airflow_provider_skynomad.agent.signing import sign

    base = f"skynomad/{job_id}/checkpoints/{seq:010d}"
    put(f"{base}/files/who", b"forged", bucket)
    files = [{"path": "who", "size": 6, "sha256": hashlib.sha256(b"forged").hexdigest()}]
    manifest = {"format": 1, "seq": seq, "step": step, "total_steps": 20, "files": files, "created_at": "x"}
    put(f"{base}/MANIFEST.json", manifest if key is None else sign(manifest, key), bucket)


def restored_marker(cloud, job_id: str, zone: str, tmp_path) -> bytes | None:
    """What the job's agent would restore in `zone` (with the job's own key), by its marker file."""
    found = cloud.checkpoint_store(job_id, zone).restore(tmp_path / "restored", tmp_path / "scratch")
    return None if found is None else (tmp_path / "restored" / "who").read_bytes()


def test_break_4_a_forged_run_record_beside_a_preempted_vm_does_not_end_the_job_as_met(compute, emulator):
    from airflow_provider_skynomad.agent.signing import derive_job_key, sign

    cloud = make_cloud(compute, checkpoint_signing_secret=SECRET)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    handle = cloud.launch(request(token="sn-b4", count=1, job_id=job_id))
    compute.preempt("us-central1-a", "sn-b4-0")
    finished = {"run_id": "sn-b4", "rank": 0, "outcome": "finished", "exit_code": 0, "stderr_tail": []}
    put(f"skynomad/{job_id}/runs/sn-b4.json", finished)  # written where any instance of the deployment can
    assert cloud.poll(handle) is GroupStatus.PREEMPTED
    put(f"skynomad/{job_id}/runs/sn-b4.json", sign({**finished, "kind": "run"}, derive_job_key(SECRET, "other")))
    assert cloud.poll(handle) is GroupStatus.PREEMPTED  # another job's key
    cloud.checkpoint_store(job_id, "us-central1-a").write_run("sn-b4", finished)  # the job's own, signed
    assert cloud.poll(handle) is GroupStatus.PREEMPTED  # a logged preemption wins over any run record

    done = cloud.launch(request(token="sn-b4-done", count=1, job_id=job_id))
    compute.set_status("us-central1-a", "sn-b4-done-0", "STOPPING")
    put(f"skynomad/{job_id}/runs/sn-b4-done.json", {**finished, "run_id": "sn-b4-done"})
    assert cloud.poll(done) is GroupStatus.FAILED  # powered off, and no record that verifies
    cloud.checkpoint_store(job_id, "us-central1-a").write_run("sn-b4", {**finished})  # another run's record
    put(f"skynomad/{job_id}/runs/sn-b4-done.json", json.loads(read(f"skynomad/{job_id}/runs/sn-b4.json")))
    assert cloud.poll(done) is GroupStatus.FAILED  # a genuine record replayed under another run id
    cloud.checkpoint_store(job_id, "us-central1-a").write_run("sn-b4-done", {**finished, "run_id": "sn-b4-done"})
    assert cloud.poll(done) is GroupStatus.SUCCEEDED


def read(path: str, bucket="ckpt-us-central1") -> bytes:
    return anonymous_storage_client().bucket(bucket).blob(path).download_as_bytes()


def test_break_4_forged_unsigned_progress_does_not_switch_off_the_net(compute, emulator, tmp_path):
    from airflow_provider_skynomad.agent.signing import derive_job_key, sign
    from airflow_provider_skynomad.jobs.watch import Watch
    from airflow_provider_skynomad.planner.actions import Mode, Option
    from airflow_provider_skynomad.planner.base import JobState
    from airflow_provider_skynomad.planner.job import JobSpec
    from airflow_provider_skynomad.planner.registry import get_policy

    cloud = make_cloud(compute, checkpoint_signing_secret=SECRET)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    handle = cloud.launch(request(token="sn-net", count=1, job_id=job_id))
    done = {"step": 20, "total_steps": 20, "seq": 99, "updated_at": "2026-12-01T12:00:00.000Z"}
    put(f"skynomad/{job_id}/progress.json", done)  # "all work done", unsigned
    assert cloud.progress(handle) is None
    put(f"skynomad/{job_id}/progress.json", sign({**done, "kind": "progress"}, derive_job_key(SECRET, "other")))
    assert cloud.progress(handle) is None

    state = JobState(elapsed_hours=0.0, running=Option("us-central1-a", Mode.SPOT))
    watch = Watch(
        job=JobSpec(work_hours=3.0, deadline_hours=4.8), job_start_hours=cloud.now_hours() - 2.0, base=state,
        group=handle, launch_delay_hours=0.2, seq=1,
    )  # fmt: skip
    assert watch.progress(cloud, elapsed=2.0) == 0.0
    event, words = watch.step(cloud, _market_down(), get_policy("skynomad"))
    assert "all work checkpointed" not in words  # the controller still decides (and its net still holds)
    assert "market table did not answer" in words

    store = cloud.checkpoint_store(job_id, "us-central1-a")  # the job's own agent: signed progress counts
    store.upload_checkpoint(*staged_checkpoint(tmp_path, 10, b"mine"), 10, 20)
    assert cloud.progress(handle) == pytest.approx(0.5)


class _MarketDown:
    def view(self, until):
        from sqlalchemy.exc import OperationalError

        raise OperationalError("SELECT ...", {}, Exception("server closed the connection unexpectedly"))


def _market_down():
    from airflow_provider_skynomad.jobs.markets import JobMarkets
    from airflow_provider_skynomad.jobs.stale import StaleGuard

    return JobMarkets(job_id="", table=None, source=_MarketDown(), stale=StaleGuard())


def test_break_5_copy_skips_unverifiable_manifests_in_the_source(compute, emulator, tmp_path):
    from airflow_provider_skynomad.agent.signing import derive_job_key

    cloud = make_cloud(compute, checkpoint_signing_secret=SECRET)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    store = cloud.checkpoint_store(job_id, "us-central1-a")
    store.upload_checkpoint(*staged_checkpoint(tmp_path, 8, b"older"), 8, 20)
    store.upload_checkpoint(*staged_checkpoint(tmp_path, 10, b"mine"), 10, 20)
    forge_checkpoint("ckpt-us-central1", job_id, 3, None)  # unsigned
    forge_checkpoint("ckpt-us-central1", job_id, 4, derive_job_key(SECRET, "other"))  # another job's key
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id=job_id) is True
    listed = anonymous_storage_client().list_blobs("ckpt-europe-west4", prefix=f"skynomad/{job_id}/")
    copied = sorted(b.name for b in listed)
    assert copied == [
        f"skynomad/{job_id}/checkpoints/0000000002/MANIFEST.json",
        f"skynomad/{job_id}/checkpoints/0000000002/files/who",
        f"skynomad/{job_id}/progress.json",
    ]
    assert restored_marker(cloud, job_id, "europe-west4-b", tmp_path) == b"mine"
    moved = cloud.launch(request(token="sn-b5", zone="europe-west4-b", count=1, job_id=job_id))
    assert cloud.progress(moved) == pytest.approx(0.5)  # the copied checkpoint's, signed


def test_break_5_a_forged_sequence_number_in_the_target_does_not_block_later_copies(compute, emulator, tmp_path):
    cloud = make_cloud(compute, checkpoint_signing_secret=SECRET)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    forge_checkpoint("ckpt-europe-west4", job_id, 9_999_999_999, None)
    store = cloud.checkpoint_store(job_id, "us-central1-a")
    store.upload_checkpoint(*staged_checkpoint(tmp_path, 5, b"first"), 5, 20)
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id=job_id) is True
    assert restored_marker(cloud, job_id, "europe-west4-b", tmp_path / "a") == b"first"
    store.upload_checkpoint(*staged_checkpoint(tmp_path, 9, b"second"), 9, 20)
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 1.0, job_id=job_id) is True
    assert restored_marker(cloud, job_id, "europe-west4-b", tmp_path / "b") == b"second"


def test_break_5_a_real_cloud_signs_by_default_so_a_forged_newer_checkpoint_is_not_restored(
    compute, emulator, tmp_path
):
    from airflow_provider_skynomad.agent.signing import KEY_ENV
    from airflow_provider_skynomad.config import SkyNomadConfig

    unsigned = make_cloud(compute, checkpoint_signing_secret=None)  # a connection without one
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ValueError, match="checkpoint_signing_secret") as refused:
        unsigned.launch(request(token="sn-nokey", count=1, job_id=job_id))
    assert "openssl rand -hex 32" in str(refused.value) and len(str(refused.value).splitlines()) == 1
    assert compute.inserts == []  # nothing launched
    assert list(anonymous_storage_client().list_blobs("ckpt-us-central1", prefix=f"skynomad/{job_id}/")) == []
    assert any("checkpoint_signing_secret" in p for p in unsigned.check(["us-central1-a"]))

    config = SkyNomadConfig(market_url="sqlite://", cloud="gcp", checkpoint_signing_secret=SECRET)
    assert SECRET not in repr(config) and SECRET not in json.dumps(config.to_dict())
    cloud = make_cloud(compute, checkpoint_signing_secret=config.checkpoint_signing_secret)
    cloud.launch(request(token="sn-key", count=1, job_id=job_id))
    assert f"{KEY_ENV}=" in items_of(compute.inserts[-1])["startup-script"]
    store = cloud.checkpoint_store(job_id, "us-central1-a")
    store.upload_checkpoint(*staged_checkpoint(tmp_path, 5, b"mine"), 5, 20)
    forge_checkpoint("ckpt-us-central1", job_id, 7, None)
    assert restored_marker(cloud, job_id, "us-central1-a", tmp_path) == b"mine"

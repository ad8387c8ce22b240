"""The GCP adapter end to end through the real operator and ``dag.test()``.

Compute Engine is a fake at the adapter boundary (tests/support/gcp_fakes.py): it checks each
insert as a real ``compute_v1.Instance`` and "boots" the instance by running its startup script
as a local process `BOOT_SECONDS` after the insert, with its own GCE metadata stub. The startup
script runs the real workload agent, which keeps the job's checkpoints in the GCS emulator on
localhost; the adapter reads them through the google provider's GCSHook on an anonymous
``google_cloud_default`` connection.

The run: launch in us-central1 (the first insert's answer is lost, so the task's retry must find
the group by its token, not launch another), the stub says preempted and Compute Engine logs
``compute.instances.preempted`` → the agent uploads its last checkpoint → PREEMPTED → relaunch
in europe-west4 → checkpoint copied across the regional buckets → finished, with the model
bit-identical to an uninterrupted local run of the bundled training loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from datetime import datetime
from types import SimpleNamespace

import pandas as pd
import pytest

from airflow_provider_skynomad.cli.demo import run_dag_test, task_result
from airflow_provider_skynomad.clouds.gcp import cloud as gcp
from tests.support import metadata_stub  # noqa: E402
from tests.support.gcp_fakes import FakeCompute, FakeGceHook, LocalBoot, anonymous_storage_client, gcs_emulator

from .conftest import DAGS_FOLDER

SIGNING_SECRET = "deployment-signing-secret-0123456789"  # the connection's checkpoint_signing_secret

ZONE_A, ZONE_B = "us-central1-a", "europe-west4-b"
BUCKET_A, BUCKET_B = "sn-ckpt-us-central1", "sn-ckpt-europe-west4"
PREEMPT_AT_STEP = 6
# A VM boots before its startup script runs (Compute Engine: tens of seconds); the job copies the
# checkpoint right after the insert returns, so B's agent finds it when it restores.
BOOT_SECONDS = 3.0


def load_dag(name: str):
    spec = importlib.util.spec_from_file_location(f"test_dag_{name}", DAGS_FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def market_rows(now: pd.Timestamp, hours: float = 48.0) -> pd.DataFrame:
    """Two GCP H100 markets probed every 10 minutes: us-central1-a cheaper than europe-west4-b."""
    times = pd.date_range(end=now - pd.Timedelta(minutes=1), periods=int(hours * 6), freq="10min")
    rows = []
    for zone, spot in ((ZONE_A, 2.2), (ZONE_B, 2.6)):
        for at in times:
            rows.append(market_row(at, zone, spot, 16))
    return pd.DataFrame(rows)


def market_row(at, zone: str, spot: float, available: int) -> dict:
    return {
        "observed_at": at,
        "cloud": "gcp",
        "region": zone.rsplit("-", 1)[0],
        "zone": zone,
        "instance_type": "a3-highgpu-1g",
        "accelerator": "H100",
        "accelerator_count": 1,
        "requested": 16,
        "available": available,
        "spot_price": spot,
        "on_demand_price": 11.0,
    }


def append_market(rows: pd.DataFrame) -> None:
    from airflow_provider_skynomad.market.store.table import MarketTable

    table = MarketTable()
    table.create()
    table.append(rows)
    table.close()


@pytest.fixture
def gcp_env(airflow_db, skynomad_home, tmp_path, monkeypatch):
    with gcs_emulator([BUCKET_A, BUCKET_B]) as url:
        compute = FakeCompute()
        compute.templates.add("gpu-us")
        compute.region_templates.add(("europe-west4", "gpu-eu"))
        monkeypatch.setattr(gcp, "make_compute_hook", lambda conn_id: FakeGceHook(compute))
        monkeypatch.setenv(
            "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT",
            json.dumps({"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True, "project": "proj"}}),
        )
        vm = tmp_path / "vm"
        vm.mkdir()
        boot = LocalBoot(
            compute,
            vm,
            env={**os.environ, "STORAGE_EMULATOR_HOST": url},
            stub_factory=lambda: metadata_stub.MetadataStub().start(),
            boot_seconds=BOOT_SECONDS,
        )
        options = {
            "source_instance_template": {
                "us-central1": "gpu-us",
                "europe-west4": "projects/proj/regions/europe-west4/instanceTemplates/gpu-eu",
            },
            "checkpoint_bucket": "sn-ckpt-{region}",
            "python": sys.executable,
            "work_dir": str(vm),
            "power_off_command": LocalBoot.POWER_OFF,
            "spot_usd_per_hour": {"a3-highgpu-1g": 2.2},
        }

        def connect(**changes):
            extra = {
                "cloud": "gcp",
                "gcp_project": "proj",
                "checkpoint_signing_secret": SIGNING_SECRET,
                "cloud_options": {**options, **changes},
            }
            monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad", "extra": extra}))

        connect()
        append_market(market_rows(pd.Timestamp.now(tz="UTC")))
        try:
            yield SimpleNamespace(compute=compute, boot=boot, url=url, vm=vm, connect=connect)
        finally:
            boot.stop()


def lose_the_first_insert_answer(compute: FakeCompute) -> None:
    """The first insert reaches Compute Engine but its answer is lost: the task fails and retries."""
    real_insert = compute.insert
    lost = []

    def insert(request, **kw):
        op = real_insert(request, **kw)
        if not lost:
            lost.append(request)
            raise ConnectionResetError("connection reset by peer while waiting for the insert's answer")
        return op

    compute.insert = insert


def progress_step(bucket: str) -> tuple[str, int] | None:
    """(job id, step) of the job store in `bucket`, if its progress.json has landed."""
    client = anonymous_storage_client()
    for blob in client.list_blobs(bucket, prefix="skynomad/"):
        if blob.name.endswith("/progress.json") and blob.name.count("/") == 2:
            return blob.name.split("/")[1], int(json.loads(blob.download_as_bytes())["step"])
    return None


def preempt_region_a(env, seen: dict) -> None:
    """Once region A's member has checkpointed PREEMPT_AT_STEP steps: the market sees A full, the
    metadata server says preempted, Compute Engine logs the operation, then deletes the VM."""
    give_up = time.monotonic() + 150
    while time.monotonic() < give_up:
        found = progress_step(BUCKET_A)
        if found and found[1] >= PREEMPT_AT_STEP:
            break
        time.sleep(0.3)
    else:
        seen["error"] = "region A never reached the step to preempt at"
        return
    (name,) = [n for z, n in list(env.compute.instances) if z == ZONE_A]
    seen["job_id"], seen["step_at_notice"], seen["name"] = found[0], found[1], name
    append_market(pd.DataFrame([market_row(pd.Timestamp.now(tz="UTC"), ZONE_A, 2.2, 0)]))
    env.compute.full_zones.add(ZONE_A)
    seen["preempted_wall"] = time.time()
    env.boot.preempt(ZONE_A, name)
    seen["deleted_wall"] = time.time()


def test_gcp_preemption_moves_the_job_to_another_region_and_the_model_is_bit_identical(gcp_env, tmp_path):
    from airflow_provider_skynomad.workload import default_steps
    from airflow_provider_skynomad.workload.train import MODEL_FILE, train

    module = load_dag("skynomad_gcp_e2e")
    compute = gcp_env.compute
    lose_the_first_insert_answer(compute)
    seen: dict = {}
    chaos = threading.Thread(target=preempt_region_a, args=(gcp_env, seen), daemon=True)
    chaos.start()
    started = time.monotonic()
    state, run_id = run_dag_test(module.dag)
    wall = time.monotonic() - started
    summary = task_result(module.dag.dag_id, run_id, "train")
    chaos.join(timeout=40)
    assert "error" not in seen, seen
    assert state == "success", summary

    # launch in A, once; the retry found it by its token instead of inserting again; then B
    created = [(r["zone"], r["instance_resource"]["name"]) for r in compute.created]
    assert [z for z, _ in created] == [ZONE_A, ZONE_B], created
    assert len([r for r in compute.inserts if r["zone"] == ZONE_A]) == 1  # nothing re-sent to A
    first = compute.created[0]
    assert first["source_instance_template"] == "global/instanceTemplates/gpu-us"
    assert compute.created[1]["source_instance_template"] == (
        "projects/proj/regions/europe-west4/instanceTemplates/gpu-eu"
    )
    for request in compute.created:
        body = request["instance_resource"]
        assert body["scheduling"]["provisioning_model"] == "SPOT"
        assert body["scheduling"]["instance_termination_action"] == "DELETE"
        labels = body["labels"]
        assert labels["skynomad-dag"] == "skynomad_gcp_e2e" and labels["skynomad-task"] == "train"
        assert labels["skynomad-run"] == gcp.label_value(run_id) and labels["skynomad-try"] in ("1", "2")
        assert labels["skynomad-job"] == gcp.label_value(summary["job_id"])
        metadata = json.dumps(body["metadata"])
        assert "STORAGE_EMULATOR_HOST" not in metadata and "GOOGLE_APPLICATION_CREDENTIALS" not in metadata
    assert summary["preemptions"] == 1 and summary["migrations"] == 1, summary
    assert summary["deadline_met"] is True

    # the last checkpoint went up within the notice; B restored it (copied across the buckets)
    job_id = summary["job_id"]
    records = {
        b.name.rsplit("/", 1)[-1]: json.loads(b.download_as_bytes())
        for bucket in (BUCKET_A, BUCKET_B)
        for b in anonymous_storage_client().list_blobs(bucket, prefix=f"skynomad/{job_id}/runs/")
    }
    outcomes = sorted(r["outcome"] for r in records.values())
    assert outcomes == ["finished", "preempted"], records
    preempted = next(r for r in records.values() if r["outcome"] == "preempted")
    notice, last_upload, ended = (
        datetime.fromisoformat(preempted[k]) for k in ("notice_at", "last_upload_at", "ended_at")
    )
    # the last checkpoint is in GCS this long after the notice (0: the newest was up before it)
    notice_to_upload = max(0.0, (last_upload - notice).total_seconds())
    notice_to_exit = (ended - notice).total_seconds()
    assert last_upload <= ended and 0 <= notice_to_exit < 30  # within GCP's 30 s soft-off
    b_created = compute.created_wall[1]
    preemption_to_relaunch = b_created - seen["preempted_wall"]
    finished = next(r for r in records.values() if r["outcome"] == "finished")
    assert finished["restored_step"] >= seen["step_at_notice"]  # B resumed from A's last checkpoint, not from 0

    # the final model, from region B's bucket, equals an uninterrupted local run's, byte for byte
    produced = anonymous_storage_client().bucket(BUCKET_B).blob(f"skynomad/{job_id}/output/{MODEL_FILE}")
    reference = tmp_path / "reference"
    train(reference, default_steps(module.WORK_HOURS), 0.0)
    assert produced.download_as_bytes() == (reference / MODEL_FILE).read_bytes()
    assert summary["output_dir"] == f"gs://{BUCKET_B}/skynomad/{job_id}/output"
    assert compute.instances == {} or all(i.status == "TERMINATED" for i in compute.instances.values())
    print(
        f"\nGCP e2e: wall {wall:.0f} s; preempted at step {seen['step_at_notice']}, "
        f"B restored step {finished['restored_step']}; notice → last checkpoint "
        f"{notice_to_upload:.1f} s, → agent exit {notice_to_exit:.1f} s; "
        f"preemption → relaunch insert in {ZONE_B} {preemption_to_relaunch:.1f} s; "
        f"compute calls {dict(compute.calls)}"
    )


def test_bad_settings_fail_before_any_launch_naming_the_setting(gcp_env, capfd):
    module = load_dag("skynomad_gcp_e2e")
    gcp_env.connect(source_instance_template={"us-central1": "no-such-template"}, checkpoint_bucket="missing-{region}")
    state, run_id = run_dag_test(module.dag)
    assert state == "failed"
    log = capfd.readouterr().out
    assert "the gcp cloud cannot run this job yet" in log
    assert "template 'no-such-template' (region us-central1) does not exist in project proj" in log
    assert "bucket 'missing-europe-west4' for region europe-west4 does not exist" in log
    assert gcp_env.compute.inserts == [] and gcp_env.boot.processes == {}
    cloud = gcp.GcpCloud(
        project_id="proj",
        source_instance_template={"us-central1": "no-such-template"},
        checkpoint_bucket="missing-{region}",
        checkpoint_signing_secret=SIGNING_SECRET,
    )
    assert cloud.check([ZONE_A, ZONE_B], "a3-highgpu-1g") == [
        "cloud_options.source_instance_template has no template for region europe-west4 (nor cloud_options.image)",
        "cloud_options.checkpoint_bucket: bucket 'missing-europe-west4' for region europe-west4 does not exist",
        "cloud_options.source_instance_template: template 'no-such-template' (region us-central1) does not exist "
        "in project proj",
        "cloud_options.checkpoint_bucket: bucket 'missing-us-central1' for region us-central1 does not exist",
    ]

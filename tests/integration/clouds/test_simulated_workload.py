"""The bundled training workload on the simulated cloud, moved to another region mid-run: it ends with
the model of an uninterrupted run, bit for bit. Real workload processes, killed and resumed; the
simulated cloud's own semantics are tests/unit/clouds/simulated/test_simulated.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from airflow_provider_skynomad.clouds.base import GroupStatus
from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
from airflow_provider_skynomad.workload import train_command
from tests.support.simulated import (
    CROSS_REGION_USD_PER_GB,
    JOB,
    live_members,
    no_leftover_groups,  # noqa: F401 - a fixture
    request,
    wait_for,
    write_trace,
)

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)"),
    pytest.mark.usefixtures("no_leftover_groups"),
]


@pytest.fixture
def trace(tmp_path) -> Path:
    return write_trace(tmp_path / "trace.csv")


def test_training_moved_to_another_region_mid_run_ends_bit_identical(trace, tmp_path):
    """The bundled workload, migrated mid-run as the planner would: stop, copy the checkpoint, resume elsewhere.

    The move is triggered by observed progress rather than by a trace capacity loss so the test
    does not depend on how fast this machine imports scikit-learn (preemption itself is covered by
    tests/unit/clouds/simulated/test_simulated.py; tests/integration/workload/test_train_resume.py kills
    the workload with SIGKILL at arbitrary instants).
    """
    from airflow_provider_skynomad.workload.train import MODEL_FILE, train

    cloud = SimulatedCloud(trace, tmp_path / "state", speed=3600)
    command = train_command(total_steps=30, work_hours=6.0)  # 0.2 wall seconds per step
    first = cloud.launch(request("r1-b", token="run-1", count=1, command=command))
    done = wait_for(lambda: (cloud.progress(first) or 0) >= 0.3 and cloud.progress(first), timeout_s=60, what="30%")
    cloud.terminate(first)
    wait_for(lambda: not live_members(cloud.describe(first)["pgid"]), what="first group gone")
    stopped_at = cloud.progress(first)
    assert done <= stopped_at < 1

    second = cloud.launch(request("r2-a", token="run-2", count=1, spot=False, command=command))
    cloud.copy_checkpoint("r1-b", "r2-a", 50, job_id=JOB)  # during the new group's cold start, as the driver does
    wait_for(lambda: cloud.poll(second) is GroupStatus.SUCCEEDED, timeout_s=120, what="resumed run to finish")

    reference = train(tmp_path / "uninterrupted", 30)
    assert cloud.output_location(JOB, "r1-b") is None  # the stopped run never finished
    assert cloud.output_location(JOB, "r2-a") == str(cloud.checkpoint_dir(JOB, "r2-a") / "output")
    resumed_bytes = (Path(cloud.output_location(JOB, "r2-a")) / MODEL_FILE).read_bytes()
    resumed = pickle.loads(resumed_bytes)
    assert (resumed.coef_ == reference.coef_).all() and (resumed.intercept_ == reference.intercept_).all()
    assert resumed_bytes == (tmp_path / "uninterrupted" / MODEL_FILE).read_bytes()
    bill = cloud.bill()
    assert bill["egress_usd"] == pytest.approx(50 * CROSS_REGION_USD_PER_GB)
    assert [(g["zone"], g["status"]) for g in bill["groups"]] == [("r1-b", "terminated"), ("r2-a", "succeeded")]
    assert (Path(cloud.describe(second)["group_dir"]) / "workload.log").exists()

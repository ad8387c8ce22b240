"""SimulatedCloud with several groups in one zone: they share the trace's spot capacity.

A tiny synthetic trace: zone z1-a shows 4 instances every hour except trace hour 2, when it shows
2 (a drop that takes back one of two 2-instance groups: the younger). Groups without a command
test the rule quickly; groups with a workload test that the supervisor stops the workload at
the instant the records say.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import CapacityError, GroupHandle, GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
from tests.support.waiting import wait_for

FAST = 36000.0  # 1 simulated hour = 0.1 wall seconds
# 1 simulated minute per wall second: for tests that need no simulated time to pass, the drop at hour 2
# and the trace's end stay hours of wall time away however long a busy box takes to start a process.
STILL = 60.0
START = pd.Timestamp("2025-01-01T00:00:00Z")
DROP_HOUR = 2  # z1-a shows 2 instead of 4 during trace hour 2
SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")
# Marks its start and the notice (SIGTERM) in its working directory, then runs until killed.
NOTICED = (
    sys.executable,
    "-c",
    textwrap.dedent(
        """
        import pathlib, signal, sys, time
        def noticed(*_):
            pathlib.Path("got-sigterm").touch()
            sys.exit(0)
        signal.signal(signal.SIGTERM, noticed)
        pathlib.Path("started").touch()
        while True:
            time.sleep(0.01)
        """
    ),
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)")


@pytest.fixture
def trace(tmp_path) -> Path:
    rows = [
        {
            "observed_at": (START + pd.Timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cloud": "gcp",
            "region": "z1",
            "zone": zone,
            "instance_type": "g1",
            "accelerator": "H100",
            "accelerator_count": 1,
            "requested": 4,
            "available": 2 if (zone == "z1-a" and h == DROP_HOUR) else 4,
            "spot_price": 1.0,
            "on_demand_price": 10.0,
        }
        for h in range(48)
        for zone in ("z1-a", "z1-b")
    ]
    path = tmp_path / "trace.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture(autouse=True)
def _no_leftover_groups(tmp_path):
    yield
    for config in tmp_path.rglob("cloud.json"):
        cloud = SimulatedCloud.attach(config.parent)
        for group in cloud.groups():
            cloud.terminate(GroupHandle.from_dict({k: group[k] for k in GroupHandle.__dataclass_fields__}))


def request(token: str, count: int = 2, zone: str = "z1-a", **kwargs) -> LaunchRequest:
    return LaunchRequest("gcp", "z1", zone, "g1", count, True, token, job_id=f"job-{token}", **kwargs)


# -- launches and probes see what other groups hold ---------------------------------------------


def test_a_launch_beyond_what_other_groups_leave_is_refused_in_plain_words(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST)
    cloud.launch(request("a", count=3))
    with pytest.raises(CapacityError, match="the trace shows 4 available, other groups hold 3, 1 left"):
        cloud.launch(request("b", count=2))
    cloud.launch(request("c", count=2, zone="z1-b"))  # another zone has its own capacity
    cloud.launch(LaunchRequest("gcp", "z1", "z1-a", "g1", 2, False, "d", job_id="job-d"))  # on-demand: no limit
    assert [g["client_token"] for g in cloud.groups()] == ["a", "c", "d"]


def test_a_probe_is_granted_only_what_other_groups_leave(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=STILL)
    assert cloud.probe("z1", "z1-a", "g1", 4).available == 4
    handle = cloud.launch(request("a", count=3))
    assert cloud.probe("z1", "z1-a", "g1", 4).available == 1
    assert cloud.bill()["probes"] == 2
    cloud.terminate(handle)
    assert cloud.probe("z1", "z1-a", "g1", 4).available == 4


def test_two_clouds_on_one_state_dir_see_each_others_holdings(trace, tmp_path):
    """As the worker and a test in another process would: the holdings live in the shared state."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=STILL)
    cloud.launch(request("a", count=3, zone="z1-b"))  # z1-b: no drop while the other process starts
    other = SimulatedCloud.attach(cloud.state_dir)
    assert other.probe("z1", "z1-b", "g1", 4).available == 1
    script = textwrap.dedent(
        f"""
        from airflow_provider_skynomad.clouds.base import CapacityError, LaunchRequest
        from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
        cloud = SimulatedCloud.attach({str(cloud.state_dir)!r})
        try:
            cloud.launch(LaunchRequest("gcp", "z1", "z1-b", "g1", 2, True, "b", job_id="job-b"))
        except CapacityError as exc:
            print(exc)
        cloud.launch(LaunchRequest("gcp", "z1", "z1-b", "g1", 1, True, "c", job_id="job-c"))
        """
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert output.returncode == 0, output.stderr
    assert "other groups hold 3, 1 left" in output.stdout
    assert cloud.probe("z1", "z1-b", "g1", 4).available == 0  # the other process's group holds the last one


def test_concurrent_launches_never_both_get_the_last_capacity(trace, tmp_path):
    """Threads open the zone's lock file separately, so they exclude each other as processes do."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST)
    results: dict[str, str] = {}
    barrier = threading.Barrier(6)

    def launch(token: str) -> None:
        barrier.wait()
        try:
            cloud.launch(request(token))
            results[token] = "launched"
        except CapacityError:
            results[token] = "refused"

    threads = [threading.Thread(target=launch, args=(f"t{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(results.values()) == ["launched"] * 2 + ["refused"] * 4
    assert sum(g["count"] for g in cloud.groups() if g["status"] != "terminated") == 4


# -- a drop takes back the youngest; an older group's end frees capacity --------------------------


def test_a_capacity_drop_takes_back_the_youngest_group_only(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST)
    older, younger = cloud.launch(request("a")), cloud.launch(request("b"))
    cloud.sleep_until_simulated(DROP_HOUR + 0.1)
    assert cloud.poll(older) is GroupStatus.RUNNING
    assert cloud.poll(younger) is GroupStatus.PREEMPTED
    record = cloud.describe(younger)
    assert record["ended_at_hours"] == pytest.approx(DROP_HOUR)
    assert "trace shows 2 available" in record["end_reason"]
    assert "groups launched earlier hold 2: 0 left < 2" in record["end_reason"]
    cloud.sleep_until_simulated(DROP_HOUR + 1.1)  # capacity is back: there is room again, the group stays lost
    assert cloud.probe("z1", "z1-a", "g1", 4).available == 2
    assert cloud.poll(younger) is GroupStatus.PREEMPTED


def test_an_older_group_terminated_frees_capacity_and_pushes_back_a_younger_groups_loss(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST)
    older, middle = cloud.launch(request("a")), cloud.launch(request("b"))
    with pytest.raises(CapacityError):
        cloud.launch(request("c"))
    cloud.terminate(older)
    youngest = cloud.launch(request("c"))  # the freed capacity
    cloud.sleep_until_simulated(DROP_HOUR + 0.1)
    assert cloud.poll(middle) is GroupStatus.RUNNING  # now the oldest: it keeps its capacity
    assert cloud.poll(youngest) is GroupStatus.PREEMPTED
    assert cloud.describe(youngest)["ended_at_hours"] == pytest.approx(DROP_HOUR)


def test_the_supervisor_gives_the_youngest_its_notice_at_the_drop(trace, tmp_path):
    """One simulated hour per wall second leaves the workloads time to start on a busy machine."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=3600, preemption_notice_seconds=300)
    older = cloud.launch(request("a", command=NOTICED))
    younger = cloud.launch(request("b", command=NOTICED))
    for handle in (older, younger):
        wait_for(lambda h=handle: (cloud.work_dir(h) / "started").exists(), what="workload start")
    assert cloud.now_hours() < DROP_HOUR
    wait_for(lambda: (cloud.work_dir(younger) / "got-sigterm").exists(), what="the younger group's notice")
    assert cloud.now_hours() >= DROP_HOUR
    assert cloud.poll(younger) is GroupStatus.PREEMPTED
    assert cloud.describe(younger)["ended_at_hours"] == pytest.approx(DROP_HOUR)
    cloud.sleep_until_simulated(DROP_HOUR + 0.5)
    assert cloud.poll(older) is GroupStatus.RUNNING
    assert not (cloud.work_dir(older) / "got-sigterm").exists()


def test_an_older_workload_that_exits_lets_the_younger_supervisor_keep_running(trace, tmp_path):
    """Nobody polls the older group: the younger's supervisor finds its exit itself at the drop."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=3600, preemption_notice_seconds=300)
    quick = (sys.executable, "-c", "pass")
    cloud.launch(request("a", command=quick, env={"SKYNOMAD_COLD_START_HOURS": "0"}))
    younger = cloud.launch(request("b", command=NOTICED))
    wait_for(lambda: (cloud.work_dir(younger) / "started").exists(), what="workload start")
    cloud.sleep_until_simulated(DROP_HOUR + 0.5)
    assert not (cloud.work_dir(younger) / "got-sigterm").exists()
    assert cloud.poll(younger) is GroupStatus.RUNNING
    statuses = {g["client_token"]: g["status"] for g in cloud.groups()}
    assert statuses == {"a": "succeeded", "b": "running"}

"""SimulatedCloud: capacity, preemption, idempotency, cross-process state, billing, process hygiene, egress.

Most tests replay a tiny synthetic trace (hourly rows, exact prices) at 36 000× real time, so
one simulated hour takes 0.1 wall seconds and costs can be asserted exactly; one test replays
a window of the bundled GCP trace with a known capacity loss. The bundled training workload moved
to another region mid-run is tests/integration/clouds/test_simulated_workload.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_skynomad.agent.store import CheckpointStore
from airflow_provider_skynomad.clouds.base import CapacityError, GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.simulated import cloud as simulated
from airflow_provider_skynomad.clouds.simulated.cloud import CLIENT_TOKEN_TAG, SimulatedCloud, TraceEndedError
from airflow_provider_skynomad.clouds.simulated.launcher import group_alive
from airflow_provider_skynomad.market.observations import read_observations
from tests.support.simulated import (
    CROSS_REGION_USD_PER_GB,
    FAST,
    JOB,
    SAME_REGION_USD_PER_GB,
    SLEEPER,
    live_members,
    no_leftover_groups,  # noqa: F401 - a fixture
    request,
    wait_for,
    write_trace,
)

BUNDLED_GCP = Path(__file__).parents[4] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)"),
    pytest.mark.usefixtures("no_leftover_groups"),
]


@pytest.fixture
def trace(tmp_path) -> Path:
    return write_trace(tmp_path / "trace.csv")


@pytest.fixture
def cloud(trace, tmp_path) -> SimulatedCloud:
    return SimulatedCloud(trace, tmp_path / "state", speed=FAST)


# -- capacity and preemption ----------------------------------------------------------------


def test_spot_launch_without_capacity_is_refused_and_nothing_is_billed(cloud):
    with pytest.raises(CapacityError, match="r2-a.*1 available"):
        cloud.launch(request("r2-a", command=SLEEPER))
    bill = cloud.bill()
    assert bill["groups"] == [] and bill["total_usd"] == 0
    assert not (cloud.state_dir / "groups").exists()  # no process was started
    # On-demand always launches, whatever the spot capacity.
    handle = cloud.launch(request("r2-a", spot=False))
    assert cloud.poll(handle) in (GroupStatus.STARTING, GroupStatus.RUNNING)


def test_preemption_at_the_traces_capacity_loss_gives_notice_then_kills(trace, tmp_path):
    """Clock hour 0 = trace hour 8, so r1-a loses capacity at clock hour 2.

    Real-time-ish speed (1 h per wall second) leaves the workload time to start even on a busy machine.
    """
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=3600, trace_start=8.0, preemption_notice_seconds=300)
    ignores_sigterm = textwrap.dedent(
        """
        import pathlib, signal, time
        signal.signal(signal.SIGTERM, lambda *a: pathlib.Path("got-sigterm").touch())
        pathlib.Path("started").touch()
        while True:
            time.sleep(1)
        """
    )
    handle = cloud.launch(request("r1-a", command=(sys.executable, "-c", ignores_sigterm)))
    zone_dir = cloud.work_dir(handle)  # the group's local disk: the workload's cwd
    wait_for(lambda: (zone_dir / "started").exists(), what="workload start")
    pgid = cloud.describe(handle)["pgid"]
    assert cloud.now_hours() < 2.0 and cloud.poll(handle) is GroupStatus.RUNNING

    cloud.sleep_until_simulated(2.05)
    assert cloud.poll(handle) is GroupStatus.PREEMPTED
    wait_for(lambda: (zone_dir / "got-sigterm").exists(), what="SIGTERM notice")
    # It ignores SIGTERM; the supervisor SIGKILLs the whole group once the notice (300 s = 0.08 s) is over.
    wait_for(lambda: not live_members(pgid), what="group killed after the notice")
    # No member of it (the workload included) holds its lock: a killed process whose leader already
    # shows as a zombie may still have a thread closing its files for a moment.
    wait_for(lambda: not group_alive(zone_dir.parent), what="group's lock released")

    record = cloud.describe(handle)
    assert record["ended_at_hours"] == 2.0
    assert record["ended_at"] == "2025-01-01T10:00:00+00:00"
    assert "0 available < 2" in record["end_reason"]
    cloud.sleep_until_simulated(3.1)  # trace hour 11.1: capacity is back, the group stays preempted
    assert cloud.poll(handle) is GroupStatus.PREEMPTED


def test_preemption_is_found_however_late_the_poll(trace, tmp_path):
    """Nobody polls during the loss; the group still ends, and stops billing, at the trace's instant."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST, trace_start=8.0)
    handle = cloud.launch(request("r1-a", command=SLEEPER))
    pgid = cloud.describe(handle)["pgid"]
    cloud.sleep_until_simulated(3.5)  # trace hour 11.5, after the one-hour outage
    assert not live_members(pgid)  # stopped at the loss by its supervisor, before anyone polled
    assert cloud.poll(handle) is GroupStatus.PREEMPTED
    record = cloud.describe(handle)
    assert record["ended_at_hours"] == pytest.approx(2.0)
    assert record["usd"] == pytest.approx(2 * 2.0 * (2.0 - record["launched_at_hours"]))


def test_capacity_loss_in_the_bundled_gcp_trace(tmp_path):
    """Find a drop below the gang size after ≥ 2 h of capacity in a real zone; the group is preempted exactly then."""
    zone, gang = "us-west1-a", 8
    available = read_observations(BUNDLED_GCP, zones=[zone]).set_index("observed_at")["available"]
    enough = available >= gang
    run_started = available.index.to_series().where(enough & ~enough.shift(fill_value=False)).ffill()
    drops = ~enough & enough.shift(fill_value=False)
    run_hours = (available.index.to_series() - run_started.shift()) / pd.Timedelta(hours=1)
    loss_at = available.index[drops & (run_hours >= 2.0)][0]
    before = loss_at - pd.Timedelta(hours=2)
    # One simulated hour per wall second: the outage may last one 10-minute row, 0.17 s to launch in.
    cloud = SimulatedCloud(BUNDLED_GCP, tmp_path / "state", speed=3600, trace_start=before.isoformat())
    region = zone.rsplit("-", 1)[0]
    handle = cloud.launch(
        LaunchRequest("gcp", region, zone, "a3-highgpu-1g", gang, True, "gcp-1", command=SLEEPER, job_id=JOB)
    )
    cloud.sleep_until_simulated((loss_at - before) / pd.Timedelta(hours=1) + 0.01)
    with pytest.raises(CapacityError):  # a new gang is refused there now, too
        cloud.launch(LaunchRequest("gcp", region, zone, "a3-highgpu-1g", gang, True, "gcp-2", job_id=JOB))
    assert cloud.poll(handle) is GroupStatus.PREEMPTED
    assert pd.Timestamp(cloud.describe(handle)["ended_at"]) == loss_at


# -- idempotency, cross-process state -------------------------------------------------------


def test_launch_is_idempotent_on_the_client_token(cloud):
    first = cloud.launch(request("r1-b", command=SLEEPER, tags={"skynomad-job": "j1"}))
    again = cloud.launch(request("r1-b", command=SLEEPER, tags={"skynomad-job": "j1"}))
    assert again == first
    groups = cloud.groups()
    assert len(groups) == 1 and len(list((cloud.state_dir / "groups").iterdir())) == 1
    assert groups[0]["tags"] == {"skynomad-job": "j1", CLIENT_TOKEN_TAG: "job-1"}
    assert [g["group_id"] for g in cloud.groups({"skynomad-job": "j1"})] == [groups[0]["group_id"]]
    assert cloud.groups({"skynomad-job": "j2"}) == []
    with pytest.raises(ValueError, match="client token 'job-1'.*zone"):
        cloud.launch(request("r1-a", command=SLEEPER))
    cloud.terminate(first)


def test_concurrent_launches_lose_no_group_and_never_duplicate_a_token(cloud):
    """Threads open separate lock descriptions, so they exclude each other as processes do."""
    from concurrent.futures import ThreadPoolExecutor

    same = [request(token="shared") for _ in range(6)]
    distinct = [request(token=f"own-{i}", spot=False) for i in range(6)]  # spot: only 2 fit in r1-b
    with ThreadPoolExecutor(max_workers=6) as pool:
        handles = list(pool.map(cloud.launch, same + distinct))
    assert len(set(handles[:6])) == 1
    tokens = sorted(g["client_token"] for g in cloud.groups())
    assert tokens == sorted(["shared"] + [f"own-{i}" for i in range(6)])


def test_another_process_sees_the_same_clock_and_groups(cloud, trace):
    handle = cloud.launch(request("r1-b", command=SLEEPER, tags={"team": "ml"}))
    script = textwrap.dedent(
        f"""
        import json, sys
        from airflow_provider_skynomad.clouds.base import GroupHandle
        from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
        cloud = SimulatedCloud.attach({str(cloud.state_dir)!r})
        handle = GroupHandle.from_dict(json.loads(sys.argv[1]))
        print(json.dumps({{"now_hours": cloud.now_hours(), "status": cloud.poll(handle).value,
                          "group": cloud.describe(handle)}}))
        cloud.terminate(handle)
        """
    )
    before = cloud.now_hours()
    output = subprocess.run(
        [sys.executable, "-c", script, json.dumps(handle.to_dict())], capture_output=True, text=True, timeout=120
    )
    after = cloud.now_hours()
    assert output.returncode == 0, output.stderr
    seen = json.loads(output.stdout)
    assert before <= seen["now_hours"] <= after  # one clock: the epoch is shared through state_dir
    assert seen["status"] in ("starting", "running")
    assert seen["group"]["group_id"] == cloud.describe(handle)["group_id"]
    assert seen["group"]["tags"] == {"team": "ml", CLIENT_TOKEN_TAG: "job-1"}
    assert cloud.poll(handle) is GroupStatus.TERMINATED  # terminated over there, seen here
    assert not live_members(seen["group"]["pgid"])


def test_launch_and_probe_refuse_to_run_past_the_end_of_the_trace(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST, trace_start=47.5)  # the last row holds 1 h
    cloud.sleep_until_simulated(1.1)
    with pytest.raises(TraceEndedError, match="past the end of trace.csv.*fresh state_dir"):
        cloud.launch(request())
    with pytest.raises(TraceEndedError):
        cloud.probe("r1", "r1-b", "g1", 1)


def test_reopening_a_state_dir_with_other_settings_is_an_error(cloud, trace):
    same = SimulatedCloud(trace, cloud.state_dir, speed=FAST)
    assert same.clock == cloud.clock
    with pytest.raises(ValueError, match="speed=36000.0 .asked 3600.0.*attach"):
        SimulatedCloud(trace, cloud.state_dir, speed=3600)
    assert SimulatedCloud.attach(cloud.state_dir).clock == cloud.clock


# -- workload lifecycle ---------------------------------------------------------------------


def test_workload_starts_after_the_cold_start_in_its_job_and_zone_directory(cloud):
    reports = textwrap.dedent(
        """
        import json, os, pathlib, time
        pathlib.Path("started.json").write_text(json.dumps({"wall": time.time(), "cwd": os.getcwd(),
            "checkpoint_dir": os.environ["SKYNOMAD_CHECKPOINT_DIR"], "job": os.environ["JOB"]}))
        """
    )
    env = {"SKYNOMAD_COLD_START_HOURS": "10", "JOB": "j1"}  # 1 wall second: still starting when polled
    handle = cloud.launch(request(command=(sys.executable, "-c", reports), env=env))
    record = cloud.describe(handle)
    assert cloud.poll(handle) is GroupStatus.STARTING
    report_path = cloud.work_dir(handle) / "started.json"
    wait_for(lambda: cloud.poll(handle) is GroupStatus.SUCCEEDED, what="success")
    started = json.loads(report_path.read_text())
    assert started["wall"] >= cloud.clock.wall_at_hours(record["launched_at_hours"] + 10)
    # The agent runs it on the group's local disk, from its checkpoint restored there.
    assert started["cwd"] == str(Path(record["group_dir"]) / "work") == str(cloud.work_dir(handle))
    assert started["checkpoint_dir"] == str(cloud.work_dir(handle) / "checkpoint")
    assert started["job"] == "j1"
    ended = cloud.describe(handle)
    assert ended["exit_code"] == 0 and ended["ended_at_hours"] >= record["launched_at_hours"] + 10
    assert cloud.bill()["as_of_hours"] > ended["ended_at_hours"]  # billing stopped at the exit, not at the poll


def test_exit_status_and_progress(cloud):
    writes_progress = textwrap.dedent(
        """
        import json, os, pathlib, sys
        pathlib.Path(os.environ["SKYNOMAD_CHECKPOINT_DIR"], "progress.json").write_text(
            json.dumps({"step": 3, "total_steps": 4}))
        sys.exit(int(sys.argv[1]))
        """
    )
    env = {"SKYNOMAD_COLD_START_HOURS": "0"}
    assert cloud.progress(cloud.launch(request("r2-a", spot=False, token="idle"))) is None  # no progress file yet
    failed = cloud.launch(request("r1-b", token="fails", command=(sys.executable, "-c", writes_progress, "3"), env=env))
    wait_for(lambda: cloud.poll(failed) is GroupStatus.FAILED, what="failure")
    assert cloud.describe(failed)["exit_code"] == 3
    assert cloud.progress(failed) == 0.75
    succeeds = (sys.executable, "-c", writes_progress, "0")
    ok = cloud.launch(request("r2-a", spot=False, token="works", command=succeeds, env=env))
    wait_for(lambda: cloud.poll(ok) is GroupStatus.SUCCEEDED, what="success")
    with pytest.raises(ValueError, match="SKYNOMAD_COLD_START_HOURS"):
        cloud.launch(request("r1-a", token="bad", env={"SKYNOMAD_COLD_START_HOURS": "soon"}))


def test_terminate_kills_the_whole_process_group_and_is_idempotent(cloud):
    forks = (sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)")
    handle = cloud.launch(request(command=forks, env={"SKYNOMAD_COLD_START_HOURS": "0"}))
    pgid = cloud.describe(handle)["pgid"]
    wait_for(lambda: len(live_members(pgid)) >= 3, what="supervisor, workload and its child")
    cloud.terminate(handle)
    cloud.terminate(handle)
    assert cloud.poll(handle) is GroupStatus.TERMINATED
    wait_for(lambda: not live_members(pgid), timeout_s=5, what="no process left in the group")
    ended = cloud.describe(handle)["ended_at_hours"]
    time.sleep(0.05)
    assert cloud.describe(handle)["ended_at_hours"] == ended  # a second terminate did not move the end


def test_terminate_during_the_cold_start_never_starts_the_workload(cloud):
    marker = cloud.job_dir(JOB, "r1-b") / "started"
    handle = cloud.launch(request(command=("touch", str(marker)), env={"SKYNOMAD_COLD_START_HOURS": "10"}))
    pgid = cloud.describe(handle)["pgid"]
    assert cloud.poll(handle) is GroupStatus.STARTING
    cloud.terminate(handle)
    cloud.sleep_until_simulated(cloud.describe(handle)["launched_at_hours"] + 11)
    assert not marker.exists() and not live_members(pgid)


# -- billing, probes, egress ----------------------------------------------------------------


def test_bill_is_price_times_time_following_price_changes(trace, tmp_path):
    """Clock hour 0 = trace hour 3: r1-a spot costs $1/h until clock hour 2, then $2/h."""
    # 1 simulated hour per wall second (4 s of wall time): a busy box's scheduling stalls, tenths of a
    # second, are hundredths of an hour against the nominal schedule's 0.3 h, not whole hours as at FAST.
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=3600, trace_start=3.0)
    spot = cloud.launch(request("r1-a"))
    on_demand = cloud.launch(request("r2-a", token="od", spot=False, count=3))
    cloud.sleep_until_simulated(4.0)
    cloud.terminate(spot)
    cloud.terminate(on_demand)
    bill = cloud.bill()
    s, od = (next(g for g in bill["groups"] if g["zone"] == zone) for zone in ("r1-a", "r2-a"))
    exact_spot = 2 * (1.0 * (2.0 - s["launched_at_hours"]) + 2.0 * (s["ended_at_hours"] - 2.0))
    assert bill["spot_usd"] == pytest.approx(exact_spot, rel=1e-12)
    assert bill["on_demand_usd"] == pytest.approx(3 * 12.0 * od["hours"], rel=1e-12)
    # Against the nominal schedule (launch at 0, stop at 4): off only by wall-clock jitter.
    assert bill["spot_usd"] == pytest.approx(2 * (1.0 * 2 + 2.0 * 2), abs=2 * 2.0 * 0.3)
    assert bill["spot_hours"] == pytest.approx(4.0, abs=0.3) and bill["spot_instance_hours"] == 2 * bill["spot_hours"]
    assert bill["on_demand_hours"] == pytest.approx(od["ended_at_hours"] - od["launched_at_hours"])
    assert bill["total_usd"] == pytest.approx(bill["spot_usd"] + bill["on_demand_usd"])


def test_probe_reports_capped_capacity_and_bills_one_minute(cloud):
    result = cloud.probe("r1", "r1-a", "g1", 16)
    assert (result.requested, result.available, result.spot_usd_per_hour, result.on_demand_usd_per_hour) == (
        16, 4, 1.0, 10.0,
    )  # fmt: skip
    assert cloud.probe("r2", "r2-a", "g1", 1).available == 1
    bill = cloud.bill()
    assert bill["probes"] == 2
    assert bill["probe_usd"] == pytest.approx(4 * 1.0 / 60 + 1 * 3.0 / 60)
    with pytest.raises(ValueError, match="no market nowhere:g1"):
        cloud.probe("r1", "nowhere", "g1", 1)
    with pytest.raises(ValueError, match="region r1"):
        cloud.probe("r2", "r1-a", "g1", 1)


def test_copy_checkpoint_moves_files_and_charges_egress(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST)
    source = cloud.checkpoint_dir(JOB, "r1-a")
    source.mkdir(parents=True)
    (source / "checkpoint.pkl").write_bytes(b"weights")
    (source / "progress.json").write_text('{"step": 1, "total_steps": 2}')
    stale = cloud.checkpoint_dir(JOB, "r2-a")
    stale.mkdir(parents=True)
    (stale / "old.pkl").write_bytes(b"stale")

    cloud.copy_checkpoint("r1-a", "r1-b", 50, job_id=JOB)  # same region: $0.01/GB
    cloud.copy_checkpoint("r1-a", "r2-a", 50, job_id=JOB)  # another region
    cloud.copy_checkpoint("r1-a", "r1-a", 50, job_id=JOB)  # same zone: nothing to do
    cloud.copy_checkpoint("r1-b", "r1-b", 50, job_id=JOB)
    assert sorted(p.name for p in cloud.checkpoint_dir(JOB, "r2-a").iterdir()) == ["checkpoint.pkl", "progress.json"]
    assert (cloud.checkpoint_dir(JOB, "r1-b") / "checkpoint.pkl").read_bytes() == b"weights"
    bill = cloud.bill()
    assert SAME_REGION_USD_PER_GB == 0.01
    assert bill["egress_usd"] == pytest.approx(50 * 0.01 + 50 * CROSS_REGION_USD_PER_GB)
    assert [e["target_zone"] for e in bill["egress"]] == ["r1-b", "r2-a"]

    priced = SimulatedCloud(trace, tmp_path / "other", speed=FAST, egress_usd_per_gb=lambda a, b: 0.07)
    priced.copy_checkpoint("r1-a", "r1-b", 10, job_id=JOB)  # nothing in r1-a here: nothing moved, nothing charged
    priced.checkpoint_dir(JOB, "r1-a").mkdir(parents=True)
    (priced.checkpoint_dir(JOB, "r1-a") / "checkpoint.pkl").write_bytes(b"w")
    priced.copy_checkpoint("r1-a", "r2-a", 10, job_id=JOB)
    assert priced.bill()["egress_usd"] == pytest.approx(0.7)


def test_bill_filtered_by_tags_covers_one_jobs_groups_probes_and_copies(trace, tmp_path):
    """A job's bill: what carries its tag (groups, probes, checkpoint copies), nothing of anyone else's."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=600)  # r1-a's price holds for 30 wall seconds
    mine, theirs = {"skynomad-job": "sn-mine"}, {"skynomad-job": "sn-theirs"}
    cloud.launch(request("r1-a", token="mine-1", tags=mine))
    cloud.launch(request("r2-a", token="theirs-1", spot=False, count=1, tags=theirs))
    cloud.probe("r1", "r1-a", "g1", 2, tags=mine)
    cloud.probe("r2", "r2-a", "g1", 1)  # e.g. the probe DAG's: untagged
    (cloud.checkpoint_dir(JOB, "r1-a") / "checkpoint.pkl").write_bytes(b"w")  # the launch made the directory
    cloud.copy_checkpoint("r1-a", "r1-b", 50, job_id=JOB, tags=mine)  # $0.01/GB within the region
    cloud.copy_checkpoint("r1-a", "r2-a", 50, job_id=JOB, tags=theirs)
    everything, bill = cloud.bill(), cloud.bill(tags=mine)
    assert [g["client_token"] for g in bill["groups"]] == ["mine-1"]
    assert bill["on_demand_usd"] == 0 and bill["spot_usd"] == pytest.approx(bill["groups"][0]["usd"])
    assert bill["probes"] == 1 and bill["probe_usd"] == pytest.approx(2 * 1.0 / 60)
    assert [e["target_zone"] for e in bill["egress"]] == ["r1-b"] and bill["egress_usd"] == pytest.approx(0.5)
    assert bill["total_usd"] == pytest.approx(bill["spot_usd"] + bill["egress_usd"] + bill["probe_usd"])
    assert len(everything["groups"]) == 2 and everything["probes"] == 2
    assert everything["egress_usd"] == pytest.approx(0.5 + 50 * CROSS_REGION_USD_PER_GB)
    assert [g["client_token"] for g in cloud.groups(tags=theirs)] == ["theirs-1"]


# -- checkpoints per job, the workload's environment, find, crash safety, failure detail ---------

WRITES_PROGRESS = textwrap.dedent(
    """
    import json, os, pathlib, sys
    checkpoint = pathlib.Path(os.environ["SKYNOMAD_CHECKPOINT_DIR"])
    (checkpoint / "weights.bin").write_text(sys.argv[1])
    (checkpoint / "progress.json").write_text(json.dumps({"step": int(sys.argv[2]), "total_steps": 4}))
    """
)


def restored(cloud, job_id: str, zone: str, tmp_path: Path) -> dict[str, str]:
    """The files a launch of `job_id` in `zone` would restore (the agent's newest complete checkpoint)."""
    target = tmp_path / f"restored-{job_id}-{zone}-{time.monotonic_ns()}"
    assert CheckpointStore(cloud.checkpoint_dir(job_id, zone).as_uri()).restore(target, tmp_path / "scratch")
    return {p.name: p.read_text() for p in target.iterdir() if p.is_file()}


def test_progress_is_dated_by_when_the_agent_wrote_it_on_the_accelerated_clock(cloud):
    """The agent stamps progress.json with this host's wall clock; the simulated cloud answers it on its
    own clock, which the pace compares with its looks (jobs/watch.py): after the group launched, before
    now, and as old as the wall time since (times the speed)."""
    env = {"SKYNOMAD_COLD_START_HOURS": "0"}
    command = (sys.executable, "-c", WRITES_PROGRESS, "A", "1")
    handle = cloud.launch(request("r1-b", "dated", job_id="job-dated", command=command, env=env))
    wait_for(lambda: cloud.poll(handle) is GroupStatus.SUCCEEDED, what="workload to finish")
    launched = cloud.describe(handle)["launched_at_hours"]
    done = cloud.progress(handle)
    assert done == 0.25 and launched <= done.at_hours <= cloud.now_hours()
    time.sleep(0.05)  # half a simulated hour at FAST
    again = cloud.progress(handle)
    assert again.at_hours == done.at_hours and cloud.now_hours() - again.at_hours >= 0.05 * FAST / 3600


def test_two_jobs_in_one_zone_never_see_each_others_checkpoints(cloud, tmp_path):
    """Checkpoints belong to a job: same zone, different jobs, separate progress, copies and output."""
    env = {"SKYNOMAD_COLD_START_HOURS": "0"}
    a = cloud.launch(
        request("r1-b", "a-1", job_id="job-a", command=(sys.executable, "-c", WRITES_PROGRESS, "A", "1"), env=env)
    )
    b = cloud.launch(
        request("r1-b", "b-1", job_id="job-b", command=(sys.executable, "-c", WRITES_PROGRESS, "B", "3"), env=env)
    )
    assert (a.job_id, a.region, b.job_id, b.region) == ("job-a", "r1", "job-b", "r1")
    for handle in (a, b):
        wait_for(lambda h=handle: cloud.poll(h) is GroupStatus.SUCCEEDED, what="workload to finish")
    assert (cloud.progress(a), cloud.progress(b)) == (0.25, 0.75)
    assert cloud.checkpoint_store("job-b", "r1-b").read_run("b-1")["outcome"] == "finished"  # the agent's record
    assert cloud.checkpoint_dir("job-a", "r1-b") != cloud.checkpoint_dir("job-b", "r1-b")
    assert cloud.checkpoint_dir("job-a", "r1-b") == cloud.state_dir / "jobs" / "job-a" / "r1-b" / "checkpoint"

    # Job B already has a checkpoint in r2-a; copying job A's to r2-a must leave it alone.
    theirs = cloud.checkpoint_dir("job-b", "r2-a")
    theirs.mkdir(parents=True)
    (theirs / "weights.bin").write_text("B, older")
    assert cloud.copy_checkpoint("r1-b", "r2-a", 10, job_id="job-a") is True
    assert restored(cloud, "job-a", "r2-a", tmp_path)["weights.bin"] == "A"  # what a launch there restores
    assert (theirs / "weights.bin").read_text() == "B, older"
    assert restored(cloud, "job-b", "r1-b", tmp_path)["weights.bin"] == "B"
    # A job with no checkpoint there copies nothing and pays nothing; so does a copy onto itself.
    assert cloud.copy_checkpoint("r1-b", "r2-a", 10, job_id="job-c") is False
    assert cloud.copy_checkpoint("r1-b", "r1-b", 10, job_id="job-a") is False
    bill = cloud.bill()
    assert [(e["job_id"], e["target_zone"]) for e in bill["egress"]] == [("job-a", "r2-a")]
    assert bill["egress_usd"] == pytest.approx(10 * CROSS_REGION_USD_PER_GB)
    assert cloud.output_location("job-a", "r1-b") == str(cloud.checkpoint_dir("job-a", "r1-b") / "output")
    assert (Path(cloud.output_location("job-b", "r1-b")) / "weights.bin").read_text() == "B"
    assert cloud.output_location("job-c", "r1-b") is None


def test_resources_are_live_groups_and_checkpoint_stores_and_release_ends_them(cloud):
    """What `skynomad cleanup` finds (by tags) and ends; ending a thing twice is harmless."""
    env = {"SKYNOMAD_COLD_START_HOURS": "0"}
    writes = (sys.executable, "-c", WRITES_PROGRESS, "A", "1")
    done = cloud.launch(request("r1-b", "a-1", job_id="job-a", command=writes, env=env, tags={"dag": "d1"}))
    wait_for(lambda: cloud.poll(done) is GroupStatus.SUCCEEDED, what="workload to finish")
    # On-demand: a spot group's capacity in this trace depends on how long the machine took so far.
    live = cloud.launch(request("r2-a", "b-1", job_id="job-b", spot=False, command=SLEEPER, tags={"dag": "d2"}))
    live_id = cloud.describe(live)["group_id"]

    found = {(r.kind, r.id): r for r in cloud.resources()}
    assert sorted(found) == [("checkpoint", "job-a/r1-b"), ("checkpoint", "job-b/r2-a"), ("instance", live_id)]
    instance = found[("instance", live_id)]
    assert (instance.job_id, instance.zone, instance.region, instance.tags["dag"]) == ("job-b", "r2-a", "r2", "d2")
    checkpoint_tags = {"skynomad-job": "job-a", "dag": "d1", "skynomad-deployment": "default"}
    assert found[("checkpoint", "job-a/r1-b")].tags == checkpoint_tags
    assert [(r.kind, r.id) for r in cloud.resources({"dag": "d1"})] == [("checkpoint", "job-a/r1-b")]

    for _ in range(2):  # idempotent
        cloud.release(instance)
        cloud.release(found[("checkpoint", "job-a/r1-b")])
    assert cloud.poll(live) is GroupStatus.TERMINATED
    wait_for(lambda: not live_members(cloud.describe(live)["pgid"]), timeout_s=5, what="the group to be killed")
    assert not cloud.checkpoint_dir("job-a", "r1-b").exists() and cloud.progress(done) is None
    assert [(r.kind, r.id) for r in cloud.resources()] == [("checkpoint", "job-b/r2-a")]
    with pytest.raises(ValueError, match="no zone"):
        cloud.release(simulated.Resource("gcp", "checkpoint", "job-a/../../x", "r1", "x", "job-a"))


def test_a_launch_must_name_a_path_safe_job(cloud):
    with pytest.raises(ValueError, match="job_id is empty"):
        cloud.launch(request(job_id=""))
    with pytest.raises(ValueError, match="job_id '../x'"):
        cloud.launch(request(job_id="../x"))
    with pytest.raises(ValueError, match="job_id"):
        cloud.copy_checkpoint("r1-a", "r1-b", 1, job_id="")
    assert cloud.groups() == []


def test_workload_gets_the_jobs_environment_not_the_hosts(cloud, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_X", "postgresql://user:secret@db/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("LC_TIME", "C")
    dumps_env = (sys.executable, "-c", "import json, os; open('env.json', 'w').write(json.dumps(dict(os.environ)))")
    handle = cloud.launch(request(command=dumps_env, env={"SKYNOMAD_COLD_START_HOURS": "0", "WANDB_MODE": "offline"}))
    wait_for(lambda: cloud.poll(handle) is GroupStatus.SUCCEEDED, what="workload to finish")
    env = json.loads((cloud.work_dir(handle) / "env.json").read_text())
    assert "AIRFLOW_CONN_X" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert not any("secret" in value for value in env.values())
    assert env["PATH"] == os.environ["PATH"] and env["LC_TIME"] == "C"
    assert env["WANDB_MODE"] == "offline"  # the request's own env
    assert env["HOME"] == str(Path(cloud.describe(handle)["group_dir"]) / "home")  # the group's, not the host's
    assert env["SKYNOMAD_CHECKPOINT_DIR"] == str(cloud.work_dir(handle) / "checkpoint")  # restored by the agent
    assert env["SKYNOMAD_JOB_ID"] == JOB
    provided = {"HOME", "WANDB_MODE", "SKYNOMAD_COLD_START_HOURS", "PWD", "_"}  # PWD, _: set by shells only
    unexpected = {
        k
        for k in env
        if k not in provided and not k.startswith(("SKYNOMAD_", "LC_")) and k not in simulated.HOST_ENV_KEPT
    }
    assert unexpected == set()


def test_find_looks_a_launch_up_without_launching(cloud):
    assert cloud.find("never-launched") is None
    assert cloud.groups() == [] and not (cloud.state_dir / "groups").exists()
    handle = cloud.launch(request(command=SLEEPER, tags={"skynomad-job": "j"}))
    assert cloud.find("job-1") == handle
    assert handle.job_id == JOB and handle.region == "r1"
    cloud.terminate(handle)
    assert cloud.find("job-1") == handle  # an ended group is still the group that token launched
    assert len(cloud.groups()) == 1


def _running_groups(cloud) -> list[dict]:
    return [g for g in cloud.groups() if g["pgid"] is not None and live_members(g["pgid"])]


@pytest.mark.parametrize("where", ["recording", "spawning"])
def test_a_failure_after_the_processes_started_leaves_a_tracked_group(cloud, monkeypatch, where):
    """Whether recording fails or the spawn raises after starting them, the processes belong to the token's group."""
    if where == "recording":

        def crash(self, group_id, pgid):
            raise RuntimeError("worker died before recording the group")

        monkeypatch.setattr(SimulatedCloud, "_record_spawned", crash)
    else:
        real = simulated.spawn_group

        def crash(*args, **kwargs):
            real(*args, **kwargs)
            raise RuntimeError("worker died right after starting the group")

        monkeypatch.setattr(simulated, "spawn_group", crash)
    with pytest.raises(RuntimeError, match="worker died"):
        cloud.launch(request(command=SLEEPER))
    monkeypatch.undo()

    found = cloud.find("job-1")
    assert found is not None and cloud.poll(found) in (GroupStatus.STARTING, GroupStatus.RUNNING)
    assert cloud.launch(request(command=SLEEPER)) == found  # the retried launch: same group, nothing new
    (group,) = cloud.groups()
    assert len(list((cloud.state_dir / "groups").iterdir())) == 1
    assert group["pgid"] is not None and live_members(group["pgid"])
    cloud.terminate(found)
    wait_for(lambda: not live_members(group["pgid"]), timeout_s=5, what="the group to be killed")


CRASHING_LAUNCHER = textwrap.dedent(
    """
    import json, os, sys
    from airflow_provider_skynomad.clouds.simulated import cloud as simulated
    from airflow_provider_skynomad.clouds.base import LaunchRequest

    cloud = simulated.SimulatedCloud.attach(sys.argv[1])
    real = simulated.spawn_group

    def crash_after(*args, **kwargs):
        real(*args, **kwargs)
        os._exit(7)

    def crash_before(*args, **kwargs):
        os._exit(7)

    simulated.spawn_group = crash_after if sys.argv[2] == "after" else crash_before
    cloud.launch(LaunchRequest.from_dict(json.loads(sys.argv[3])))
    """
)


def _crash_a_launcher(cloud, when: str, launch: LaunchRequest) -> None:
    argv = [sys.executable, "-c", CRASHING_LAUNCHER, str(cloud.state_dir), when, json.dumps(launch.to_dict())]
    assert subprocess.run(argv, capture_output=True, text=True, timeout=120).returncode == 7


@pytest.fixture
def slow_cloud(trace, tmp_path) -> SimulatedCloud:
    """One simulated hour per wall second: the 48 h trace outlasts a launcher process's start-up on a loaded box."""
    return SimulatedCloud(trace, tmp_path / "state", speed=3600)


def test_a_launcher_killed_after_starting_the_group_leaves_it_findable_and_killable(slow_cloud):
    cloud = slow_cloud
    launch = request(command=SLEEPER)
    _crash_a_launcher(cloud, "after", launch)
    found = cloud.find("job-1")
    assert found is not None and found.client_token == "job-1" and found.job_id == JOB
    assert cloud.launch(launch) == found
    (group,) = _running_groups(cloud)
    cloud.terminate(found)
    assert cloud.poll(found) is GroupStatus.TERMINATED
    wait_for(lambda: not live_members(group["pgid"]), timeout_s=5, what="the group to be killed")


def test_a_launcher_killed_before_starting_any_process_leaves_no_group(slow_cloud):
    cloud = slow_cloud
    launch = request(command=SLEEPER)
    _crash_a_launcher(cloud, "before", launch)
    assert cloud.groups()[0]["status"] == "starting"  # recorded, never started
    assert cloud.find("job-1") is None  # not a group: nothing runs, and the record is dropped
    assert cloud.groups() == []
    _crash_a_launcher(cloud, "before", launch)
    handle = cloud.launch(launch)  # a retry starts it afresh
    (group,) = _running_groups(cloud)
    assert group["client_token"] == "job-1" and cloud.find("job-1") == handle
    cloud.terminate(handle)


def test_failure_detail_is_the_end_of_a_failed_workloads_log(cloud):
    fails = (sys.executable, "-c", "import sys\nfor i in range(30): print(f'line {i}', file=sys.stderr)\nsys.exit(3)")
    env = {"SKYNOMAD_COLD_START_HOURS": "0"}
    failed = cloud.launch(request(token="fails", command=fails, env=env))
    running = cloud.launch(request("r1-a", token="runs", command=SLEEPER))
    assert cloud.failure_detail(running) is None
    wait_for(lambda: cloud.poll(failed) is GroupStatus.FAILED, what="failure")
    assert cloud.failure_detail(failed) == "\n".join(f"line {i}" for i in range(10, 30))
    ok = cloud.launch(request("r2-a", token="ok", spot=False, command=(sys.executable, "-c", "print('fine')"), env=env))
    wait_for(lambda: cloud.poll(ok) is GroupStatus.SUCCEEDED, what="success")
    assert cloud.failure_detail(ok) is None
    assert cloud.console_url(ok) is None and cloud.bill() is not None


def test_launches_record_every_group_of_a_job_with_its_simulated_interval(trace, tmp_path):
    """What the invariant "never two groups of one job alive at once" reads: start/end of each launch."""
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST, trace_start=8.0)  # r1-a loses capacity at hour 2
    first = cloud.launch(request("r1-a", token="a-1", job_id="job-a"))
    other = cloud.launch(request("r2-a", token="b-1", job_id="job-b", spot=False, count=1))
    cloud.sleep_until_simulated(2.2)
    assert cloud.poll(first) is GroupStatus.PREEMPTED
    second = cloud.launch(request("r1-b", token="a-2", job_id="job-a", spot=False))

    launches = cloud.launches("job-a")
    assert [(x["client_token"], x["zone"], x["spot"], x["gang_size"]) for x in launches] == [
        ("a-1", "r1-a", True, 2),
        ("a-2", "r1-b", False, 2),
    ]
    preempted, alive = launches
    assert preempted["end_hours"] == 2.0 and "0 available < 2" in preempted["end_reason"]
    assert preempted["status"] == "preempted" and preempted["job_id"] == "job-a"
    assert preempted["cost_usd"] == pytest.approx(2 * 2.0 * (2.0 - preempted["start_hours"]))
    assert alive["start_hours"] >= preempted["end_hours"] and alive["end_hours"] is None
    assert alive["end_reason"] is None and alive["cost_usd"] >= 0
    assert [x["job_id"] for x in cloud.launches()] == ["job-a", "job-b", "job-a"]
    assert cloud.launches("job-c") == []

    cloud.terminate(second)
    cloud.terminate(other)
    ended = cloud.launches("job-a")[1]
    assert ended["end_hours"] is not None and ended["end_hours"] >= ended["start_hours"]
    assert ended["end_reason"] == "terminated on request" and ended["status"] == "terminated"
    assert ended["cost_usd"] == pytest.approx(2 * 10.0 * (ended["end_hours"] - ended["start_hours"]))


def test_a_request_probe_bills_only_what_wins_the_race_to_fulfilment(cloud, monkeypatch):
    from airflow_provider_skynomad.clouds.simulated import cloud as simulated  # bills by clouds.base's prior share

    monkeypatch.setattr(simulated, "REQUEST_FULFILLED_SHARE", 0.0)
    result = cloud.probe("r1", "r1-a", "g1", 16, kind="request")
    assert (result.kind, result.available, result.billed, result.usd) == ("request", 4, 0, 0.0)
    monkeypatch.setattr(simulated, "REQUEST_FULFILLED_SHARE", 1.0)
    lost = cloud.probe("r1", "r1-a", "g1", 16, kind="request")
    assert (lost.available, lost.billed, lost.usd) == (4, 4, pytest.approx(4 * 1.0 / 60))  # the minimum, as a launch
    assert cloud.bill()["probe_usd"] == pytest.approx(4 * 1.0 / 60)
    monkeypatch.setattr(simulated, "REQUEST_FULFILLED_SHARE", 0.3)
    draws = [simulated.request_race_billed("r1-a", h / 6, 1) for h in range(600)]
    assert draws == [simulated.request_race_billed("r1-a", h / 6, 1) for h in range(600)]  # a replay bills the same
    assert 0.2 < sum(draws) / len(draws) < 0.4
    with pytest.raises(ValueError, match="cannot probe by 'offer'"):
        cloud.probe("r1", "r1-a", "g1", 1, kind="offer")

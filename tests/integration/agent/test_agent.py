"""The workload agent end to end, as an instance runs it: a subprocess around a real workload.

The interruption notice comes from the localhost metadata stub (AWS IMDSv2, GCE metadata) or
from SIGTERM; the store is a directory, moto's S3 or the GCS emulator, all on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_provider_skynomad.agent.backends import open_backend
from airflow_provider_skynomad.agent.store import CheckpointStore
from airflow_provider_skynomad.workload import train_command
from tests.support import metadata_stub
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's process handling is Linux's")

AGENT = (sys.executable, "-m", "airflow_provider_skynomad.agent", "run")

# A workload following the protocol: files first, then the progress file. argv: total steps,
# seconds per step, what it does on SIGTERM (save: finish the step, exit 143; ignore; die).
STEPPER = textwrap.dedent(
    """
    import json, os, pathlib, signal, sys, time
    total, pace, on_term = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    ckpt = pathlib.Path(os.environ["SKYNOMAD_CHECKPOINT_DIR"])
    progress = pathlib.Path(os.environ["SKYNOMAD_PROGRESS_FILE"])
    step = json.loads(progress.read_text())["step"] if progress.exists() else 0
    if step:  # what was restored holds what the progress file says
        assert int((ckpt / "state.txt").read_text()) == step, "restored files disagree with progress"
    print(f"starting at step {step}", file=sys.stderr, flush=True)
    stop = []
    def on_sigterm(*_):
        pathlib.Path("got-sigterm").touch()
        stop.append(True)
    if on_term != "die":
        signal.signal(signal.SIGTERM, on_sigterm)
    def save(s):
        (ckpt / "state.txt").write_text(str(s))
        tmp = progress.with_name(".progress.tmp")
        tmp.write_text(json.dumps({"step": s, "total_steps": total}))
        os.replace(tmp, progress)
    while step < total:
        time.sleep(pace)
        step += 1
        save(step)
        if stop and on_term == "save":
            sys.exit(143)
    (ckpt / "result.txt").write_text(f"done at {step}")
    """
)


def stepper(total: int, pace: float = 0.02, on_term: str = "save") -> list[str]:
    return [sys.executable, "-c", STEPPER, str(total), str(pace), on_term]


def start_agent(store: str, work_dir: Path, run_id: str, command, *options: str, env: dict | None = None):
    argv = [*AGENT, "--store", store, "--work-dir", str(work_dir), "--run-id", run_id, *options, "--", *command]
    return subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(agent: subprocess.Popen, timeout_s: float = 60) -> tuple[int, str]:
    _, stderr = agent.communicate(timeout=timeout_s)
    return agent.returncode, stderr


def stored_step(uri: str) -> float:
    progress = CheckpointStore(uri).read_progress()
    return progress["step"] if progress else 0


def restored_state(uri: str, tmp_path: Path) -> tuple[dict, str]:
    """(manifest, state.txt) of what a relaunch would restore."""
    target = tmp_path / f"check-{time.monotonic_ns()}"
    manifest = CheckpointStore(uri).restore(target, tmp_path / "scratch")
    return manifest, (target / "state.txt").read_text()


@pytest.fixture
def stub():
    with metadata_stub.MetadataStub() as server:
        yield server


@pytest.fixture
def file_uri(tmp_path):
    return (tmp_path / "store").as_uri()


# -- notice → SIGTERM → last checkpoint uploaded → exit 3 ----------------------------------------


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_a_metadata_notice_stops_the_workload_and_uploads_its_last_checkpoint(cloud, stub, file_uri, tmp_path):
    env = {"SKYNOMAD_IMDS_ENDPOINT": stub.url, "SKYNOMAD_GCE_METADATA_ENDPOINT": stub.url}
    work = tmp_path / "work"
    agent = start_agent(file_uri, work, "grp-1", stepper(10_000), "--notice", cloud, "--poll-seconds", "0.05", env=env)
    wait_for(lambda: stored_step(file_uri) >= 3, timeout_s=30, what="a few checkpoints uploaded")
    stub.set_aws_notice() if cloud == "aws" else stub.set_gcp_preempted()
    code, stderr = finish(agent)
    assert code == 3, stderr
    assert (work / "got-sigterm").exists()  # the notice reached the workload as SIGTERM
    record = CheckpointStore(file_uri).read_run("grp-1")
    assert record["outcome"] == "preempted" and record["exit_code"] == 143
    assert record["notice_source"] == ("aws:spot/instance-action" if cloud == "aws" else "gcp:instance/preempted")
    # The checkpoint the workload wrote on SIGTERM is the one in the store, and it restores.
    final_local = json.loads((work / "checkpoint" / "progress.json").read_text())["step"]
    manifest, state = restored_state(file_uri, tmp_path)
    assert manifest["step"] == final_local == record["step"] and state == str(final_local)
    assert record["notice_to_upload_seconds"] >= 0
    print(f"{cloud}: notice → last checkpoint uploaded in {record['notice_to_upload_seconds'] * 1000:.0f} ms")
    assert sum(stub.rejected.values()) == 0  # IMDSv2 token / Metadata-Flavor header always sent


def test_a_rebalance_recommendation_uploads_but_does_not_stop(stub, file_uri, tmp_path):
    env = {"SKYNOMAD_IMDS_ENDPOINT": stub.url}
    agent = start_agent(
        file_uri, tmp_path / "w", "grp-1", stepper(60), "--notice", "aws", "--poll-seconds", "0.05", env=env
    )
    wait_for(lambda: stored_step(file_uri) >= 1, timeout_s=30, what="a first checkpoint")
    stub.set_rebalance()
    code, stderr = finish(agent)
    assert code == 0, stderr
    assert "rebalance recommendation" in stderr
    assert CheckpointStore(file_uri).read_run("grp-1")["outcome"] == "finished"


def test_sigterm_to_an_agent_whose_workload_ignores_it_ends_within_the_notice(file_uri, tmp_path):
    notice = 3.0
    env = {"SKYNOMAD_NOTICE_SECONDS": str(notice)}
    agent = start_agent(
        file_uri, tmp_path / "w", "grp-1", stepper(10_000, on_term="ignore"), "--notice", "simulated", env=env
    )
    wait_for(lambda: stored_step(file_uri) >= 3, timeout_s=30, what="a few checkpoints uploaded")
    agent.send_signal(signal.SIGTERM)
    code, stderr = finish(agent)
    assert code == 3, stderr
    record = CheckpointStore(file_uri).read_run("grp-1")
    assert record["outcome"] == "preempted" and record["exit_code"] == -signal.SIGKILL  # killed, not waited for
    assert record["notice_source"] == "sigterm"
    assert record["notice_to_upload_seconds"] < notice  # done before the cloud's SIGKILL would come
    local = json.loads((tmp_path / "w" / "checkpoint" / "progress.json").read_text())["step"]
    assert restored_state(file_uri, tmp_path)[0]["step"] == local  # what it wrote until the kill is stored


# -- failure, success, rank > 0 ---------------------------------------------------------------------


FAILS = textwrap.dedent(
    """
    import json, os, pathlib, sys
    ckpt = pathlib.Path(os.environ["SKYNOMAD_CHECKPOINT_DIR"])
    (ckpt / "state.txt").write_text("2")
    pathlib.Path(os.environ["SKYNOMAD_PROGRESS_FILE"]).write_text(json.dumps({"step": 2, "total_steps": 5}))
    for i in range(30):
        print(f"line {i}", file=sys.stderr)
    sys.exit(3)
    """
)


def test_a_failing_workload_exits_1_with_its_stderr_tail(file_uri, tmp_path):
    code, stderr = finish(start_agent(file_uri, tmp_path / "w", "grp-1", [sys.executable, "-c", FAILS]))
    assert code == 1
    tail = [f"line {i}" for i in range(10, 30)]
    assert "the workload exited 3; the last 20 lines of its stderr:\n" + "\n".join(f"  {x}" for x in tail) in stderr
    record = CheckpointStore(file_uri).read_run("grp-1")
    assert record["outcome"] == "failed" and record["exit_code"] == 3 and record["stderr_tail"] == tail
    assert restored_state(file_uri, tmp_path)[1] == "2"  # its completed checkpoint is still progress


@pytest.mark.parametrize("kind", ["file", "s3", "gs"])
def test_a_finished_workload_exits_0_with_its_output_uploaded(kind, request, tmp_path):
    uri = request.getfixturevalue("file_uri") if kind == "file" else request.getfixturevalue(f"{kind}_uri")("job-1")
    code, stderr = finish(start_agent(uri, tmp_path / "w1", "grp-1", stepper(4, on_term="die")))
    assert code == 0, stderr
    backend = open_backend(uri)
    assert backend.get_bytes("output/result.txt") == b"done at 4"
    assert json.loads(backend.get_bytes("output/MANIFEST.json"))["files"]
    assert CheckpointStore(uri).read_progress()["step"] == 4
    assert CheckpointStore(uri).read_run("grp-1")["outcome"] == "finished"
    # A relaunch restores step 4 (the workload asserts its files agree) and finishes at once.
    code, stderr = finish(start_agent(uri, tmp_path / "w2", "grp-2", stepper(4, on_term="die")))
    assert code == 0 and "starting at step 4" in stderr, stderr


def test_an_output_that_cannot_be_uploaded_is_not_a_success(file_uri, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "output").write_text("a file where output/ should be")  # every output upload fails
    agent = start_agent(file_uri, tmp_path / "w", "grp-1", stepper(2, on_term="die"), "--poll-seconds", "0.05")
    code, stderr = finish(agent)
    assert code == 1, stderr
    record = CheckpointStore(file_uri).read_run("grp-1")
    assert record["outcome"] == "failed" and record["exit_code"] == 0  # the workload itself succeeded
    assert "output could not be uploaded" in record["stderr_tail"][-1]
    assert CheckpointStore(file_uri).read_progress()["step"] == 2  # its last checkpoint is stored: a rerun resumes


def test_rank_1_restores_and_runs_but_uploads_nothing(file_uri, tmp_path):
    code, _ = finish(start_agent(file_uri, tmp_path / "w0", "grp-1", stepper(2, on_term="die")))
    assert code == 0
    backend = open_backend(file_uri)
    before = {key: backend.get_bytes(key) for key in backend.list("")}
    code, stderr = finish(start_agent(file_uri, tmp_path / "w1", "grp-2-1", stepper(5, on_term="die"), "--rank", "1"))
    assert code == 0 and "starting at step 2" in stderr, stderr
    assert json.loads((tmp_path / "w1" / "checkpoint" / "progress.json").read_text())["step"] == 5
    assert {key: backend.get_bytes(key) for key in backend.list("")} == before  # nothing changed in the store


# -- the agent's own errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ["--store", "file://relative", "--work-dir", "w", "--run-id", "r", "--", "true"],
        ["--store", "ftp://x/y", "--work-dir", "w", "--run-id", "r", "--", "true"],
        ["--store", "file:///tmp/x", "--work-dir", "w", "--run-id", "../r", "--", "true"],
        ["--store", "file:///tmp/x", "--work-dir", "w", "--run-id", "r"],  # no workload
        ["--store", "file:///tmp/x", "--work-dir", "w", "--run-id", "r", "--notice", "azure", "--", "true"],
    ],
)
def test_bad_arguments_or_store_exit_2_before_anything_runs(options, tmp_path):
    result = subprocess.run([*AGENT, *options], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert not (tmp_path / "w" / "checkpoint").exists()


def test_a_missing_bucket_exits_2(s3_uri, tmp_path):
    missing = "s3://no-such-bucket-" + s3_uri("x").split("/")[2][5:] + "/jobs/x"
    code, stderr = finish(start_agent(missing, tmp_path / "w", "grp-1", ["true"]))
    assert code == 2 and "cannot restore from s3://no-such-bucket" in stderr and "NoSuchBucket" in stderr


# -- start-up, imports ------------------------------------------------------------------------------

REPORTS_MODULES = textwrap.dedent(
    """
    import json, sys
    already = set(sys.modules)  # e.g. the 'google' namespace some .pth files create at start-up
    from airflow_provider_skynomad.agent.cli import main
    code = main(sys.argv[1:])
    heavy = ("airflow", "boto3", "botocore", "google", "pandas", "numpy", "sklearn", "sqlalchemy")
    loaded = {m.split(".")[0] for m in set(sys.modules) - already}
    print(json.dumps({"code": code, "loaded": sorted(loaded & set(heavy)), "airflow": "airflow" in sys.modules}))
    """
)


def test_the_agent_imports_nothing_from_airflow_nor_anything_heavy(stub, file_uri, tmp_path):
    env = {**os.environ, "SKYNOMAD_IMDS_ENDPOINT": stub.url}
    argv = ["run", "--store", file_uri, "--work-dir", str(tmp_path / "w"), "--run-id", "r", "--notice", "aws"]
    result = subprocess.run(
        [sys.executable, "-c", REPORTS_MODULES, *argv, "--", *stepper(3)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": [], "airflow": False}, result.stderr

    # Start-up cost, for the record (not asserted: it depends on the machine's load).
    def best_of(argv: list[str]) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
            times.append(time.perf_counter() - started)
        return min(times)

    bare = best_of([sys.executable, "-c", "pass"])
    wrapped = best_of([*AGENT, "--store", file_uri, "--work-dir", str(tmp_path / "t"), "--run-id", "t", "--", "true"])
    print(f"agent start-up overhead: {(wrapped - bare) * 1000:.0f} ms (python -c pass: {bare * 1000:.0f} ms)")


# -- the bundled workload and the user-facing helper, through preemptions --------------------------


def test_the_bundled_training_finishes_bit_identical_through_preemptions(file_uri, tmp_path):
    from airflow_provider_skynomad.workload.train import MODEL_FILE, train

    total = 60
    command = train_command(total_steps=total, seconds_per_step=0.02)
    options = ("--poll-seconds", "0.05")
    env = {"SKYNOMAD_NOTICE_SECONDS": "5"}
    stopped_at = [0]
    for run in range(3):
        agent = start_agent(file_uri, tmp_path / f"w{run}", f"grp-{run}", command, *options, env=env)
        target = stopped_at[-1] + 2  # progress made by this run, whatever this machine's speed
        wait_for(lambda t=target: stored_step(file_uri) >= t, timeout_s=120, what=f"step {target} stored")
        agent.send_signal(signal.SIGTERM)  # a preemption at whatever instant the training is in
        code, stderr = finish(agent)
        assert code == 3, stderr
        stopped_at.append(stored_step(file_uri))
    code, stderr = finish(start_agent(file_uri, tmp_path / "last", "grp-last", command, *options, env=env), 120)
    assert code == 0, stderr
    assert stopped_at == sorted(stopped_at) and stopped_at[-1] < total  # it resumed each time, never restarted

    train(tmp_path / "uninterrupted", total)
    produced = open_backend(file_uri).get_bytes(f"output/{MODEL_FILE}")
    assert produced == (tmp_path / "uninterrupted" / MODEL_FILE).read_bytes()
    assert pickle.loads(produced).coef_.shape == (10, 64)


USES_HELPER = textwrap.dedent(
    """
    import sys, time
    from airflow_provider_skynomad.agent.workload import Checkpoints

    total = int(sys.argv[1])
    ckpt = Checkpoints()
    value = int((ckpt.path / "value.txt").read_text()) if ckpt.path else 0
    print(f"resuming at step {ckpt.step} with value {value}", file=sys.stderr, flush=True)
    for step in range(ckpt.step, total):
        time.sleep(0.02)
        value += step
        ckpt.save(step + 1, total, lambda d: (d / "value.txt").write_text(str(value)))
    (ckpt.dir / "final.txt").write_text(str(value))
    """
)


def test_the_helper_checkpoints_on_sigterm_and_resumes(file_uri, tmp_path):
    command = [sys.executable, "-c", USES_HELPER, "100000"]
    agent = start_agent(file_uri, tmp_path / "w1", "grp-1", command, env={"SKYNOMAD_NOTICE_SECONDS": "5"})
    wait_for(lambda: stored_step(file_uri) >= 3, timeout_s=30, what="a few checkpoints")
    agent.send_signal(signal.SIGTERM)
    code, stderr = finish(agent)
    assert code == 3, stderr
    record = CheckpointStore(file_uri).read_run("grp-1")
    assert record["exit_code"] == 143  # it saved the step in flight, then stopped
    step = record["step"]
    manifest = CheckpointStore(file_uri).restore(tmp_path / "check", tmp_path / "scratch")
    assert manifest["step"] == step
    assert [f["path"] for f in manifest["files"]] == [f"step-{step:010d}/value.txt"]  # one checkpoint, complete
    assert int((tmp_path / "check" / f"step-{step:010d}" / "value.txt").read_text()) == sum(range(step))

    small = [sys.executable, "-c", USES_HELPER, str(step + 3)]
    code, stderr = finish(start_agent(file_uri, tmp_path / "w2", "grp-2", small))
    assert code == 0 and f"resuming at step {step} with value {sum(range(step))}" in stderr, stderr
    assert open_backend(file_uri).get_bytes("output/final.txt") == str(sum(range(step + 3))).encode()


def test_skynomad_agent_run_is_the_same_command(file_uri, tmp_path):
    skynomad = [sys.executable, "-m", "airflow_provider_skynomad.cli", "agent"]
    argv = [*skynomad, "run", "--store", file_uri, "--work-dir", str(tmp_path / "w"), "--run-id", "grp-1"]
    # The help needs nothing of the run: it runs beside it (most of each command's time is the CLI's imports).
    helping = subprocess.Popen([*skynomad, "run", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        result = subprocess.run([*argv, "--", *stepper(2, on_term="die")], capture_output=True, text=True, timeout=120)
        help_out, _ = helping.communicate(timeout=120)
    finally:
        if helping.poll() is None:
            helping.kill()
            helping.wait()
    assert result.returncode == 0, result.stderr
    assert CheckpointStore(file_uri).read_run("grp-1")["outcome"] == "finished"
    assert helping.returncode == 0 and "--store" in help_out and "--notice" in help_out

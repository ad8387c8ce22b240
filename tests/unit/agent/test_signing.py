"""Signed manifests: a checkpoint planted under a job's prefix by anyone without that job's key
(unsigned, another job's key, or a genuine one replayed at a higher number) is never restored."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_skynomad.agent.backends import open_backend
from airflow_provider_skynomad.agent.signing import KEY_ENV, derive_job_key, key_from_env, sign, verify
from airflow_provider_skynomad.agent.snapshot import hash_all
from airflow_provider_skynomad.agent.store import CheckpointStore

SECRET = "deployment-secret-for-tests-0123456789"
KEY_A = derive_job_key(SECRET, "job-a")
KEY_B = derive_job_key(SECRET, "job-b")


@pytest.fixture(params=["file", "s3", "gs"])
def uri(request, tmp_path):
    if request.param == "file":
        return (tmp_path / "store").as_uri()
    return request.getfixturevalue(f"{request.param}_uri")("job-a")


def upload(store: CheckpointStore, tmp_path: Path, step: int, marker: bytes) -> int:
    staged = tmp_path / f"staged-{step}-{marker.hex()}"
    staged.mkdir()
    (staged / "state.txt").write_text(str(step))
    (staged / "who").write_bytes(marker)
    return store.upload_checkpoint(staged, hash_all(staged), step, 10)


def forge(uri: str, seq: int, key: bytes | None, marker: bytes) -> None:
    """A complete checkpoint `seq` claiming step 9, written straight into the prefix (no pruning)."""
    backend = open_backend(uri)
    files = {"state.txt": b"9", "who": marker}
    for name, data in files.items():
        backend.put_bytes(data, f"checkpoints/{seq:010d}/files/{name}")
    entries = [{"path": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in files.items()]
    manifest = {"format": 1, "seq": seq, "step": 9, "total_steps": 10, "files": entries, "created_at": "x"}
    if key is not None:
        manifest = sign(manifest, key)
    backend.put_bytes(json.dumps(manifest).encode(), f"checkpoints/{seq:010d}/MANIFEST.json")


def real_checkpoints(uri: str, tmp_path: Path) -> None:
    """Job A's own: seq 1 at step 2, seq 2 at step 3 (the one to restore)."""
    store = CheckpointStore(uri, key=KEY_A)
    assert upload(store, tmp_path, 2, b"job-a-older") == 1
    assert upload(store, tmp_path, 3, b"job-a") == 2


def plant_forgeries(uri: str) -> None:
    """Higher-numbered checkpoints job A never wrote there: unsigned, job B's, and A's older one replayed."""
    forge(uri, 3, None, b"unsigned")
    forge(uri, 4, KEY_B, b"job-b")
    backend = open_backend(uri)
    for key in backend.list("checkpoints/0000000001/"):
        backend.put_bytes(backend.get_bytes(key), key.replace("0000000001", "0000000005"))


def test_a_forged_higher_checkpoint_is_ignored_and_the_real_one_restored(uri, tmp_path):
    real_checkpoints(uri, tmp_path)
    plant_forgeries(uri)
    assert CheckpointStore(uri).complete_seqs() == [5, 4, 3, 2, 1]
    logged = []
    manifest = CheckpointStore(uri, key=KEY_A).restore(tmp_path / "restored", tmp_path / "scratch", logged.append)
    assert manifest["seq"] == 2 and manifest["step"] == 3
    assert (tmp_path / "restored" / "who").read_bytes() == b"job-a"
    reasons = " | ".join(logged)
    assert "names itself checkpoint 1" in reasons  # the replay
    assert "does not verify" in reasons  # job B's key
    assert "not signed" in reasons  # no signature


def test_an_altered_signed_manifest_does_not_verify(tmp_path):
    uri = (tmp_path / "store").as_uri()
    store = CheckpointStore(uri, key=KEY_A)
    upload(store, tmp_path, 3, b"one")
    upload(store, tmp_path, 4, b"two")
    backend = open_backend(uri)
    manifest = json.loads(backend.get_bytes("checkpoints/0000000002/MANIFEST.json"))
    manifest["step"] = 10  # "finished"
    backend.put_bytes(json.dumps(manifest).encode(), "checkpoints/0000000002/MANIFEST.json")
    assert store.restore(tmp_path / "restored", tmp_path / "scratch")["step"] == 3


def test_job_keys_differ_per_job_and_need_a_real_secret():
    assert KEY_A != KEY_B and len(KEY_A) == 32 and derive_job_key(SECRET, "job-a") == KEY_A
    assert derive_job_key(SECRET + "x", "job-a") != KEY_A
    with pytest.raises(ValueError, match="16 bytes"):
        derive_job_key("short", "job-a")
    assert key_from_env({KEY_ENV: KEY_A.hex()}) == KEY_A and key_from_env({}) is None
    with pytest.raises(ValueError, match="not shown") as caught:
        key_from_env({KEY_ENV: "abc123-not-hex"})
    assert "abc123" not in str(caught.value)


# A workload that reports what it was given: the restored progress and whether it saw the key.
REPORT = (
    "import json, os; "
    "print(json.dumps({'progress': json.load(open(os.environ['SKYNOMAD_PROGRESS_FILE'])), "
    "'who': open(os.path.join(os.environ['SKYNOMAD_CHECKPOINT_DIR'], 'who'), 'rb').read().decode(), "
    f"'key_seen': {KEY_ENV!r} in os.environ}}))"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's process handling is Linux's")
def test_the_agent_restores_its_own_jobs_checkpoint_over_forged_ones(tmp_path):
    uri = (tmp_path / "store").as_uri()
    real_checkpoints(uri, tmp_path)
    plant_forgeries(uri)
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_skynomad.agent", "run", "--store", uri,
         "--work-dir", str(tmp_path / "work"), "--run-id", "r1", "--", sys.executable, "-c", REPORT],
        env={**os.environ, KEY_ENV: KEY_A.hex()}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {"progress": {"step": 3, "total_steps": 10}, "who": "job-a", "key_seen": False}
    assert KEY_A.hex() not in done.stdout + done.stderr
    output = json.loads(open_backend(uri).get_bytes("output/MANIFEST.json"))  # what it wrote is signed
    verify(output, KEY_A)
    with pytest.raises(ValueError, match="does not verify"):
        verify(output, KEY_B)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's process handling is Linux's")
def test_a_malformed_key_exits_2_without_printing_it(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_skynomad.agent", "run", "--store", (tmp_path / "s").as_uri(),
         "--work-dir", str(tmp_path / "work"), "--run-id", "r1", "--", "true"],
        env={**os.environ, KEY_ENV: "zz-secret-zz"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and KEY_ENV in done.stderr and "zz-secret-zz" not in done.stderr


def test_progress_and_run_records_count_only_with_the_jobs_signature(tmp_path):
    from airflow_provider_skynomad.agent.signing import sign_claim

    uri = (tmp_path / "store").as_uri()
    store = CheckpointStore(uri, key=KEY_A)
    upload(store, tmp_path, 3, b"mine")
    assert store.read_progress()["step"] == 3  # its own, signed
    backend = open_backend(uri)
    forged = {"step": 10, "total_steps": 10, "seq": 99}
    for document in (forged, sign_claim(forged, KEY_B, "progress"), sign_claim(forged, KEY_A, "run")):
        backend.put_bytes(json.dumps(document).encode(), "progress.json")
        assert store.read_progress() is None  # unsigned, another job's key, another kind of claim
    assert CheckpointStore(uri).read_progress() == sign_claim(forged, KEY_A, "run")  # no key: nothing checked

    store.write_run("r1", {"outcome": "finished", "exit_code": 0})
    assert store.read_run("r1")["outcome"] == "finished"
    backend.put_bytes(backend.get_bytes("runs/r1.json"), "runs/r2.json")  # r1's record replayed as r2's
    assert store.read_run("r2") is None
    backend.put_bytes(json.dumps({"outcome": "finished"}).encode(), "runs/r3.json")
    assert store.read_run("r3") is None and CheckpointStore(uri, key=KEY_B).read_run("r1") is None

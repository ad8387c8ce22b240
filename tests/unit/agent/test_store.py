"""CheckpointStore on file://, moto's S3 and the GCS emulator: round trip, manifest-last, sha check, pruning."""

from __future__ import annotations

import json
import time

import pytest

from airflow_provider_skynomad.agent.backends import StoreError, open_backend
from airflow_provider_skynomad.agent.snapshot import hash_all
from airflow_provider_skynomad.agent.store import CheckpointStore


@pytest.fixture(params=["file", "s3", "gs"])
def uri(request, tmp_path):
    """A fresh, empty store prefix of each kind."""
    if request.param == "file":
        return (tmp_path / "store").as_uri()
    return request.getfixturevalue(f"{request.param}_uri")("job-1")


def _checkpoint(directory, step: int, size: int = 1000) -> list:
    """A checkpoint of two files (one in a subdirectory) whose bytes depend on `step`."""
    (directory / "sub").mkdir(parents=True, exist_ok=True)
    (directory / "weights.bin").write_bytes(bytes([step % 256]) * size)
    (directory / "sub" / "optimizer.json").write_text(json.dumps({"step": step}))
    return hash_all(directory)


def test_round_trip_keeps_the_two_newest_and_restores_the_newest(uri, tmp_path):
    store = CheckpointStore(uri)
    assert store.restore(tmp_path / "empty", tmp_path / "scratch") is None  # nothing there yet
    staged = tmp_path / "staged"
    timings = []
    for step in (1, 2, 3):
        files = _checkpoint(staged, step)
        started = time.perf_counter()
        assert store.upload_checkpoint(staged, files, step, 10) == step
        timings.append(time.perf_counter() - started)
    print(f"{uri.split(':')[0]}: one checkpoint upload (2 files, 1 kB) took {min(timings) * 1000:.1f} ms")
    assert store.complete_seqs() == [3, 2]  # the oldest was pruned
    assert store.read_progress()["step"] == 3 and store.read_progress()["seq"] == 3

    target = tmp_path / "restored"
    (target).mkdir()
    (target / "stale.txt").write_text("from an older run")  # replaced wholesale
    manifest = store.restore(target, tmp_path / "scratch")
    assert manifest["seq"] == 3 and manifest["step"] == 3 and manifest["total_steps"] == 10
    assert (target / "weights.bin").read_bytes() == bytes([3]) * 1000
    assert json.loads((target / "sub" / "optimizer.json").read_text()) == {"step": 3}
    assert not (target / "stale.txt").exists()

    again = CheckpointStore(uri)  # another agent (a relaunch) continues the sequence
    again.restore(tmp_path / "other", tmp_path / "scratch2")
    assert again.upload_checkpoint(staged, _checkpoint(staged, 4), 4, 10) == 4


def test_a_half_uploaded_checkpoint_is_never_restored(uri, tmp_path):
    store = CheckpointStore(uri)
    staged = tmp_path / "staged"
    store.upload_checkpoint(staged, _checkpoint(staged, 1), 1, 10)
    backend = open_backend(uri)
    # Checkpoint 2: its files landed, its manifest never did (the notice ran out).
    backend.put_bytes(b"\x02" * 1000, "checkpoints/0000000002/files/weights.bin")
    manifest = store.restore(tmp_path / "a", tmp_path / "scratch")
    assert manifest["seq"] == 1 and (tmp_path / "a" / "weights.bin").read_bytes() == b"\x01" * 1000

    # Checkpoint 3: complete manifest, but a file was overwritten since (wrong sha256).
    store.upload_checkpoint(staged, _checkpoint(staged, 3), 3, 10)
    backend.put_bytes(b"\x09" * 1000, "checkpoints/0000000003/files/weights.bin")
    manifest = store.restore(tmp_path / "b", tmp_path / "scratch")
    assert manifest["seq"] == 1 and (tmp_path / "b" / "weights.bin").read_bytes() == b"\x01" * 1000

    # A manifest naming a file outside its checkpoint is refused, not followed.
    escape = [{"path": "../../x", "size": 1, "sha256": ""}]
    evil = {"format": 1, "seq": 9, "step": 9, "total_steps": 10, "files": escape}
    backend.put_bytes(json.dumps(evil).encode(), "checkpoints/0000000009/MANIFEST.json")
    assert store.restore(tmp_path / "c", tmp_path / "scratch")["seq"] == 1
    assert not (tmp_path / "x").exists()


def test_output_and_run_records(uri, tmp_path):
    store = CheckpointStore(uri)
    final = tmp_path / "final"
    final.mkdir()
    (final / "model.pkl").write_bytes(b"model")
    (final / ".model.pkl.123.tmp").write_bytes(b"half")  # a temp file is no output
    store.upload_output(final, hash_all(final))
    backend = open_backend(uri)
    assert backend.get_bytes("output/model.pkl") == b"model"
    assert backend.get_bytes("output/.model.pkl.123.tmp") is None
    assert [f["path"] for f in json.loads(backend.get_bytes("output/MANIFEST.json"))["files"]] == ["model.pkl"]
    (final / "model.pkl").unlink()
    (final / "model-v2.pkl").write_bytes(b"v2")
    store.upload_output(final, hash_all(final))  # replaced, not merged
    assert backend.get_bytes("output/model.pkl") is None and backend.get_bytes("output/model-v2.pkl") == b"v2"
    store.write_run("run-1", {"outcome": "finished"})
    assert store.read_run("run-1") == {"outcome": "finished"} and store.read_run("run-2") is None


@pytest.mark.parametrize("bad", ["relative/path", "file://relative", "ftp://host/x", "s3:///no-bucket", "just-a-path"])
def test_a_malformed_store_uri_is_a_store_error(bad):
    with pytest.raises(StoreError, match="--store"):
        open_backend(bad)

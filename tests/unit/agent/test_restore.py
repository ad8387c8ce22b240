"""Restore against bad checkpoints: it falls back to the one before whatever is wrong with the
newest, and never downloads more than a manifest lists. file://, moto's S3 and the GCS emulator."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_skynomad.agent.backends import open_backend
from airflow_provider_skynomad.agent.snapshot import hash_all
from airflow_provider_skynomad.agent.store import CheckpointStore

MIB = 1 << 20


@pytest.fixture(params=["file", "s3", "gs"])
def uri(request, tmp_path):
    if request.param == "file":
        return (tmp_path / "store").as_uri()
    return request.getfixturevalue(f"{request.param}_uri")("job-1")


class Recording:
    """A backend that records how many bytes each download left on local disk."""

    def __init__(self, inner):
        self.inner = inner
        self.downloaded: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get_file(self, key, local, *args, **kwargs):
        try:
            return self.inner.get_file(key, local, *args, **kwargs)
        finally:
            self.downloaded[key] = local.stat().st_size if local.exists() else 0


def good_checkpoint(store: CheckpointStore, tmp_path: Path, step: int = 1) -> None:
    staged = tmp_path / f"staged-{step}"
    staged.mkdir()
    (staged / "weights.bin").write_bytes(bytes([step]) * 100)
    store.upload_checkpoint(staged, hash_all(staged), step, 10)


def forged_manifest(backend, seq: int, files: list[dict], step: int = 9) -> None:
    manifest = {"format": 1, "seq": seq, "step": step, "total_steps": 10, "files": files}
    backend.put_bytes(json.dumps(manifest).encode(), f"checkpoints/{seq:010d}/MANIFEST.json")


def entry(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_a_manifest_listing_a_file_and_its_directory_falls_back(uri, tmp_path):
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path)
    backend = open_backend(uri)
    backend.put_bytes(b"x", "checkpoints/0000000002/files/a/b")
    if not uri.startswith("file:"):  # an object store holds both keys; a directory cannot
        backend.put_bytes(b"x", "checkpoints/0000000002/files/a")
    forged_manifest(backend, 2, [entry("a", b"x"), entry("a/b", b"x")])
    manifest = store.restore(tmp_path / "restored", tmp_path / "scratch")
    assert manifest["seq"] == 1 and (tmp_path / "restored" / "weights.bin").read_bytes() == b"\x01" * 100


@pytest.mark.parametrize("listed", ["a", "a/"])
def test_a_directory_listed_as_a_file_falls_back(uri, tmp_path, listed):
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path)
    backend = open_backend(uri)
    backend.put_bytes(b"x", "checkpoints/0000000002/files/a/b")  # files/a is a directory (a prefix)
    forged_manifest(backend, 2, [entry(listed, b"")])
    assert store.restore(tmp_path / "restored", tmp_path / "scratch")["seq"] == 1


def test_the_same_path_twice_falls_back(tmp_path):
    uri = (tmp_path / "store").as_uri()
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path)
    backend = open_backend(uri)
    backend.put_bytes(b"x", "checkpoints/0000000002/files/a")
    forged_manifest(backend, 2, [entry("a", b"x"), entry("a", b"x")])
    assert store.restore(tmp_path / "restored", tmp_path / "scratch")["seq"] == 1


def test_an_object_larger_than_listed_is_refused_before_it_is_downloaded(uri, tmp_path):
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path)
    plain = open_backend(uri)
    plain.put_bytes(b"\0" * (64 * MIB), "checkpoints/0000000002/files/weights.bin")
    forged_manifest(plain, 2, [entry("weights.bin", b"\0")])  # listed as 1 B
    backend = Recording(open_backend(uri))
    manifest = CheckpointStore(uri, backend=backend).restore(tmp_path / "restored", tmp_path / "scratch")
    assert manifest["seq"] == 1
    downloaded = backend.downloaded["checkpoints/0000000002/files/weights.bin"]
    assert downloaded <= 1, f"{downloaded} B of a file listed as 1 B were downloaded"


def test_an_s3_object_that_grew_after_its_size_was_read_stops_downloading(s3_uri, tmp_path, monkeypatch):
    """HEAD said 1 B, GET brings 64 MiB: the transfer's own progress stops it long before the end."""
    backend = open_backend(s3_uri("job-1"))
    backend.put_bytes(b"\0" * (64 * MIB), "big")
    real_head = backend.client.head_object
    monkeypatch.setattr(backend.client, "head_object", lambda **kw: {**real_head(**kw), "ContentLength": 1})
    local = tmp_path / "big"
    with pytest.raises(ValueError, match="1 B expected"):
        backend.get_file("big", local, max_bytes=1)
    assert not local.exists() or local.stat().st_size < 32 * MIB


def test_a_file_object_is_read_no_further_than_its_listed_size(tmp_path):
    """The file store's size check and its bounded copy, each alone."""
    backend = open_backend((tmp_path / "store").as_uri())
    backend.put_bytes(b"y" * (3 * MIB), "big")
    with pytest.raises(ValueError, match="expected"):
        backend.get_file("big", tmp_path / "out", max_bytes=10)
    assert not (tmp_path / "out").exists() or (tmp_path / "out").stat().st_size <= 10
    assert backend.get_file("big", tmp_path / "ok", max_bytes=3 * MIB) and (tmp_path / "ok").stat().st_size == 3 * MIB
    with pytest.raises(ValueError, match="expected"):
        backend.get_bytes("big", max_bytes=10)


def test_a_huge_manifest_is_refused_unread(tmp_path, monkeypatch):
    import airflow_provider_skynomad.agent.store as store_module

    monkeypatch.setattr(store_module, "MAX_MANIFEST_BYTES", 1000)
    uri = (tmp_path / "store").as_uri()
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path)
    forged_manifest(open_backend(uri), 2, [entry(f"f{i}", b"") for i in range(100)])
    assert store.restore(tmp_path / "restored", tmp_path / "scratch")["seq"] == 1


def test_a_full_local_disk_is_raised_not_taken_for_a_bad_checkpoint(tmp_path, monkeypatch):
    """Falling back past a good checkpoint because this disk is full would start the job over."""
    uri = (tmp_path / "store").as_uri()
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path, 1)
    good_checkpoint(store, tmp_path, 2)

    def disk_full(key, local, max_bytes=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.backend, "get_file", disk_full)
    with pytest.raises(OSError, match="No space"):
        store.restore(tmp_path / "restored", tmp_path / "scratch")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's process handling is Linux's")
def test_the_agent_runs_from_the_older_checkpoint_instead_of_exiting_2(tmp_path):
    uri = (tmp_path / "store").as_uri()
    store = CheckpointStore(uri)
    good_checkpoint(store, tmp_path, 4)
    backend = open_backend(uri)
    backend.put_bytes(b"x", "checkpoints/0000000005/files/a/b")
    forged_manifest(backend, 5, [entry("a", b"x"), entry("a/b", b"x")])
    read_back = "import json,os; print(open(os.environ['SKYNOMAD_PROGRESS_FILE']).read())"
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_skynomad.agent", "run", "--store", uri, "--work-dir",
         str(tmp_path / "work"), "--run-id", "r1", "--", sys.executable, "-c", read_back],
        env=os.environ.copy(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"step": 4, "total_steps": 10}
    assert "checkpoint 5" in done.stderr and "not usable" in done.stderr

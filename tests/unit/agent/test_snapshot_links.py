"""Snapshots under the symlink rule of docs/agent.md: links followed, each directory copied once,
loops, dangling links and FIFOs left out and reported, and no snapshot ever stalls on them."""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

from airflow_provider_skynomad.agent import snapshot as snapshot_module
from airflow_provider_skynomad.agent.snapshot import hash_all, take

pytestmark = pytest.mark.skipif(sys.platform.startswith("win"), reason="symlinks and FIFOs")


@pytest.fixture
def checkpoint(tmp_path):
    root = tmp_path / "checkpoint"
    (root / "step-1").mkdir(parents=True)
    (root / "step-1" / "model.bin").write_bytes(b"m" * 10)
    (root / "progress.json").write_text(json.dumps({"step": 1, "total_steps": 5}))
    return root


def snapshot(root, tmp_path, timeout_s: float = 10.0):
    """`take` in a thread, so a snapshot that blocks fails the test instead of hanging it."""
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(s=take(root, root / "progress.json", tmp_path / "staging")), daemon=True
    )
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the snapshot stalled"
    return result["s"]


def test_a_symlinked_directory_is_in_the_checkpoint(checkpoint, tmp_path):
    outside = tmp_path / "elsewhere" / "optimizer"
    outside.mkdir(parents=True)
    (outside / "state.bin").write_bytes(b"o" * 7)
    (checkpoint / "optimizer").symlink_to(outside, target_is_directory=True)
    (checkpoint / "model-link.bin").symlink_to(checkpoint / "step-1" / "model.bin")
    snap = snapshot(checkpoint, tmp_path)
    assert sorted(f.path for f in snap.files) == ["model-link.bin", "optimizer/state.bin", "step-1/model.bin"]
    assert (snap.staged / "optimizer" / "state.bin").read_bytes() == b"o" * 7
    assert not (snap.staged / "optimizer").is_symlink()  # stored as files, restored as files
    assert snap.skipped == []


def test_a_symlink_loop_is_left_out_and_uploads_go_on(checkpoint, tmp_path):
    (checkpoint / "step-1" / "up").symlink_to("..", target_is_directory=True)  # a loop through the parent
    (checkpoint / "self").symlink_to("self")  # a link that never resolves
    (checkpoint / "a").symlink_to("b")
    (checkpoint / "b").symlink_to("a")
    snap = snapshot(checkpoint, tmp_path)
    assert snap is not None, "a symlink loop stopped the snapshot"
    assert [f.path for f in snap.files] == ["step-1/model.bin"]
    assert {rel for rel, _ in snap.skipped} == {"step-1/up", "self", "a", "b"}


def test_a_directory_reached_twice_is_copied_once_under_its_real_name(checkpoint, tmp_path):
    (checkpoint / "latest").symlink_to("step-1", target_is_directory=True)  # sorts before step-1
    snap = snapshot(checkpoint, tmp_path)
    assert [f.path for f in snap.files] == ["step-1/model.bin"]
    assert [rel for rel, _ in snap.skipped] == ["latest"]


def test_a_fifo_and_a_dangling_link_never_block_a_snapshot(checkpoint, tmp_path):
    os.mkfifo(checkpoint / "pipe")
    (checkpoint / "gone").symlink_to(tmp_path / "no-such-file")
    snap = snapshot(checkpoint, tmp_path)
    assert [f.path for f in snap.files] == ["step-1/model.bin"]
    assert sorted(rel for rel, _ in snap.skipped) == ["gone", "pipe"]


def test_links_that_fan_out_cost_one_copy_per_directory(tmp_path):
    """Twenty levels reached only through links, two links each to the next: 2**20 paths, 21 copies."""
    levels = [tmp_path / "levels" / f"d{i}" for i in range(21)]
    for level in levels:
        level.mkdir(parents=True)
        (level / "f").write_bytes(b"x")
    for here, below in zip(levels, levels[1:], strict=False):
        (here / "l1").symlink_to(below, target_is_directory=True)
        (here / "l2").symlink_to(below, target_is_directory=True)
    root = tmp_path / "checkpoint"
    root.mkdir()
    (root / "top").symlink_to(levels[0], target_is_directory=True)
    listing = snapshot_module.walk(root)
    assert len(listing.files) == 21 and "top/l1/l1/f" in listing.files
    assert len(listing.skipped) == 20  # each level's second link


def test_the_output_follows_the_same_rule(checkpoint, tmp_path):
    (checkpoint / "loop").symlink_to(".", target_is_directory=True)
    assert [f.path for f in hash_all(checkpoint)] == ["progress.json", "step-1/model.bin"]

"""A consistent copy of the workload's checkpoint directory, taken while the workload runs.

The workload's protocol (docs/agent.md): write a checkpoint's files, then replace the progress
file. The agent copies the files to a staging directory and uploads from there, so the upload
never reads a file the workload is rewriting. A copy is kept only if nothing moved under it:
the progress file is read before and after the copy, and every file's (inode, size, mtime) is
listed before and after; if either changed, the copy is retried. Since the progress file is
replaced only after the files it describes are complete, and files only ever get newer, the
files copied hold at least the progress claimed: a snapshot never claims more than it holds.

Names starting with '.' (temporary files of atomic writes) and the progress file itself are
not part of a checkpoint; the progress file is re-created from the manifest on restore.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
from pathlib import Path

from .store import FileEntry, copy_hashed, hash_file

ATTEMPTS = 5


class Progress(collections.namedtuple("Progress", "step total_steps raw")):
    """A progress file's numbers and its bytes (`raw`: what "changed" is decided on).

    (namedtuple, not typing.NamedTuple or a dataclass: importing those costs every agent start ~10 ms.)
    """

    __slots__ = ()

    @property
    def done(self) -> bool:
        return self.total_steps > 0 and self.step >= self.total_steps


class Snapshot(collections.namedtuple("Snapshot", "progress files staged")):
    """A consistent copy: its progress, its files (`FileEntry`) and where the copies are (`staged`)."""

    __slots__ = ()


def read_progress(path: Path) -> Progress | None:
    """The progress file's {"step", "total_steps"}, or None when absent or not (yet) valid."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
        step, total = data["step"], data["total_steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (step, total))
    return Progress(step, total, raw) if numbers else None


def write_progress(path: Path, step: float, total_steps: float) -> None:
    """The progress file a restore leaves for the workload (replaced atomically, as the workload does)."""
    tmp = path.with_name(f".{path.name}.restore.tmp")
    tmp.write_text(json.dumps({"step": step, "total_steps": total_steps}))
    os.replace(tmp, path)


def list_files(root: Path, exclude: Path | None = None) -> dict[str, tuple[int, int, int]]:
    """relpath → (inode, size, mtime_ns) of the checkpoint's files (hidden names and `exclude` left out)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            path = Path(dirpath, name)
            if name.startswith(".") or path == exclude:
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # replaced or deleted meanwhile: the next listing decides
            found[path.relative_to(root).as_posix()] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return found


def take(checkpoint_dir: Path, progress_file: Path, staging: Path) -> Snapshot | None:
    """Copy the newest complete checkpoint into `staging`; None when there is none or it kept moving."""
    for _ in range(ATTEMPTS):
        before = list_files(checkpoint_dir, progress_file)
        progress = read_progress(progress_file)
        if progress is None:
            return None
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            files = [FileEntry(rel, *copy_hashed(checkpoint_dir / rel, staging / rel)) for rel in sorted(before)]
        except FileNotFoundError:
            continue  # a file went away under the copy (the workload pruned an old one)
        again = read_progress(progress_file)
        if again is not None and again.raw == progress.raw and list_files(checkpoint_dir, progress_file) == before:
            return Snapshot(progress, files, staging)
    return None


def hash_all(directory: Path) -> list[FileEntry]:
    """Every (non-hidden) file of a directory nobody writes any more (the output, once the workload exited)."""
    return [FileEntry(rel, *hash_file(directory / rel)) for rel in sorted(list_files(directory))]

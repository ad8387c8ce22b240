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

Symbolic links (one rule, docs/agent.md): they are followed, and what they point at is stored
under the link's path (a checkpoint holds files, never links). Every directory is copied once:
the real tree first, then directories reached only through links, in name order; a link to a
directory already copied (a loop such as ``loop -> ..``, or a second name) is left out, as is a
link that cannot be resolved and anything that is not a regular file (a FIFO would block the
copy forever). What is left out is reported (`Walk.skipped`) and the agent logs it once; it
never stops a snapshot.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import stat as stat_module
from pathlib import Path

from airflow_provider_skynomad.agent.store import FileEntry, NotRegularFile, copy_hashed, hash_file

ATTEMPTS = 5


class Progress(collections.namedtuple("Progress", "step total_steps raw")):
    """A progress file's numbers and its bytes (`raw`: what "changed" is decided on).

    (namedtuple, not typing.NamedTuple or a dataclass: importing those costs every agent start ~10 ms.)
    """

    __slots__ = ()

    @property
    def done(self) -> bool:
        return self.total_steps > 0 and self.step >= self.total_steps


class Snapshot(collections.namedtuple("Snapshot", "progress files staged skipped")):
    """A consistent copy: its progress, its files (`FileEntry`), where the copies are (`staged`) and
    what the symlink rule left out (``[(relpath, why)]``)."""

    __slots__ = ()


class Walk(collections.namedtuple("Walk", "files skipped")):
    """`files`: relpath → (inode, size, mtime_ns) of what a checkpoint holds; `skipped`: [(relpath, why)]."""

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


def walk(root: Path, exclude: Path | None = None) -> Walk:
    """The checkpoint's files under the symlink rule of the module docstring (hidden names and
    `exclude` left out). Bounded by the number of distinct directories: it cannot loop."""
    files: dict[str, tuple[int, int, int]] = {}
    skipped: list[tuple[str, str]] = []
    try:
        top = os.stat(root)
    except FileNotFoundError:
        return Walk(files, skipped)
    copied = {(top.st_dev, top.st_ino)}
    real: collections.deque = collections.deque([(str(root), "")])
    linked: collections.deque = collections.deque()
    while real or linked:
        if real:
            path, rel = real.popleft()
        else:
            path, rel, ident = linked.popleft()
            if ident in copied:
                skipped.append((rel, "a link to a directory the checkpoint holds already (a loop or a second name)"))
                continue
            copied.add(ident)
        try:
            with os.scandir(path) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except FileNotFoundError:
            continue  # removed meanwhile: the next listing decides
        except OSError as exc:
            skipped.append((rel or ".", f"cannot be listed: {exc.strerror or exc}"))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            child = f"{rel}/{entry.name}" if rel else entry.name
            if exclude is not None and Path(entry.path) == exclude:
                continue
            link = entry.is_symlink()
            try:
                info = os.stat(entry.path)  # follows links
            except FileNotFoundError:
                if link:
                    skipped.append((child, "a link to nothing (dangling)"))
                continue  # otherwise replaced or deleted meanwhile: the next listing decides
            except OSError as exc:
                skipped.append((child, f"a link that cannot be resolved: {exc.strerror or exc}"))
                continue
            if stat_module.S_ISREG(info.st_mode):
                files[child] = (info.st_ino, info.st_size, info.st_mtime_ns)
            elif stat_module.S_ISDIR(info.st_mode):
                ident = (info.st_dev, info.st_ino)
                if link:
                    linked.append((entry.path, child, ident))
                elif ident in copied:  # a bind mount of a directory copied already
                    skipped.append((child, "a directory the checkpoint holds already under another name"))
                else:
                    copied.add(ident)
                    real.append((entry.path, child))
            else:
                skipped.append((child, "not a regular file (a FIFO, socket or device)"))
    return Walk(files, skipped)


def list_files(root: Path, exclude: Path | None = None) -> dict[str, tuple[int, int, int]]:
    """relpath → (inode, size, mtime_ns) of the checkpoint's files (`walk` without what it left out)."""
    return walk(root, exclude).files


def take(checkpoint_dir: Path, progress_file: Path, staging: Path) -> Snapshot | None:
    """Copy the newest complete checkpoint into `staging`; None when there is none or it kept moving."""
    for _ in range(ATTEMPTS):
        listing = walk(checkpoint_dir, progress_file)
        before = listing.files
        progress = read_progress(progress_file)
        if progress is None:
            return None
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            files = [FileEntry(rel, *copy_hashed(checkpoint_dir / rel, staging / rel)) for rel in sorted(before)]
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotRegularFile):
            continue  # a file went away or changed kind under the copy (the workload pruned an old one)
        again = read_progress(progress_file)
        if again is not None and again.raw == progress.raw and list_files(checkpoint_dir, progress_file) == before:
            return Snapshot(progress, files, staging, listing.skipped)
    return None


def hash_all(directory: Path) -> list[FileEntry]:
    """Every (non-hidden) file of a directory nobody writes any more (the output, once the workload exited)."""
    return [FileEntry(rel, *hash_file(directory / rel)) for rel in sorted(list_files(directory))]

"""A job's checkpoints under one store prefix, in the layout of docs/agent.md.

    checkpoints/<seq:010d>/files/<relpath>   one checkpoint's files
    checkpoints/<seq:010d>/MANIFEST.json     written last: {format, seq, step, total_steps, files, created_at}
    progress.json                            {step, total_steps, seq, updated_at}: after the manifest
    output/...  output/MANIFEST.json         the workload's final files, on success
    runs/<run_id>.json                       how each run ended

Why manifest-last: object stores have no rename and an upload can be cut anywhere (the notice
ends, the instance dies). A checkpoint therefore counts only once its manifest has landed, and
restore checks every file's size and sha256 against it, so neither a half-uploaded checkpoint
nor a file overwritten since is ever restored; it falls back to the previous one, which is why
the two newest are kept. `progress.json` is written after the manifest it names, so what
adapters read as progress is always restorable.

With the job's key, manifests, `progress.json` and run records are signed (agent/signing.py), and
"the newest checkpoint" is the newest one that verifies: `CheckpointStore.newest` is the one walk
that the agent's restore and the controller's cross-region copy share, so the controller carries
exactly the checkpoint the agent would restore, and a forged one (unsigned, another job's key, a
replay at another number) neither replaces it nor blocks it, however high its number.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TypeVar

from airflow_provider_skynomad.agent.backends import Backend, StoreError, open_backend
from airflow_provider_skynomad.agent.signing import PROGRESS_CLAIM, RUN_CLAIM, sign, sign_claim, verified_claim, verify
from airflow_provider_skynomad.exceptions import NotRegularFile

FORMAT = 1
CHECKPOINTS = "checkpoints/"
MANIFEST = "MANIFEST.json"
PROGRESS = "progress.json"
OUTPUT = "output/"
RUNS = "runs/"
KEEP = 2  # checkpoints kept: the newest, and the one before in case the newest cannot be read
_CHUNK = 1 << 20
MAX_MANIFEST_BYTES = 64 << 20  # ~400k files; a larger "manifest" is refused unread
MAX_CLAIM_BYTES = 1 << 20  # progress.json and run records are a few hundred bytes
# OSErrors of this machine, not of the checkpoint: an older checkpoint would fail alike, and
# starting from nothing would let the next upload prune the good ones.
_LOCAL_FAULTS = frozenset(
    code for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EMFILE, errno.ENFILE, errno.ENOMEM) if code
)

__all__ = ["CheckpointStore", "FileEntry", "StoreError", "copy_hashed", "hash_file", "now_iso"]

T = TypeVar("T")


def now_iso(wall: float | None = None) -> str:
    """UTC ISO 8601 with milliseconds (what every timestamp in the store looks like)."""
    moment = datetime.fromtimestamp(time.time() if wall is None else wall, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FileEntry(collections.namedtuple("FileEntry", "path size sha256")):
    """One file of a checkpoint: `path` relative and '/'-separated, its size and sha256."""

    __slots__ = ()

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def _open_regular(path: Path):
    """`path` opened for reading if it is a regular file; anything else raises NotRegularFile instead
    of blocking (opening a FIFO waits for a writer): the workload may swap a file under a snapshot."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def copy_hashed(source: Path, target: Path) -> tuple[int, str]:
    """Copy `source` to `target`, returning the size and sha256 of the bytes copied (one read)."""
    digest, size = hashlib.sha256(), 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with _open_regular(source) as src, open(target, "wb") as dst:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def hash_file(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with _open_regular(path) as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _safe_relpath(text: object) -> str:
    """A manifest's path, refused if it could escape the directory it is restored into, or is not
    the one spelling of a file (``a/``, ``a//b``: a directory entry, or two names for one file)."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"bad path {text!r}")
    path = PurePosixPath(text)
    if path.is_absolute() or any(part in ("", ".", "..") for part in path.parts) or "\\" in text:
        raise ValueError(f"unsafe path {text!r}")
    if path.as_posix() != text:
        raise ValueError(f"path {text!r} is not a file's path (a directory entry, or not normalised)")
    return text


def _check_no_conflicts(entries: list[FileEntry]) -> None:
    """Every path once, and none both a file and a directory (``a`` and ``a/b``): such a manifest
    cannot be restored as written, whatever order its files come in."""
    paths: set[str] = set()
    for entry in entries:
        if entry.path in paths:
            raise ValueError(f"{entry.path!r} is listed twice")
        paths.add(entry.path)
    for entry in entries:
        for parent in PurePosixPath(entry.path).parents:
            if parent.as_posix() in paths:
                raise ValueError(f"{parent.as_posix()!r} is listed as a file and as the directory of {entry.path!r}")


def _entry(item: dict) -> FileEntry:
    size = item["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"size {size!r} of {item.get('path')!r} is not a byte count")
    return FileEntry(_safe_relpath(item["path"]), size, str(item["sha256"]))


def _seq_key(seq: int) -> str:
    return f"{CHECKPOINTS}{seq:010d}/"


class CheckpointStore:
    """One job's checkpoint prefix (`uri`): upload, restore, progress, output and run records.

    With `key` (the job's, agent/signing.py) every manifest, progress.json and run record written
    is signed, a checkpoint is restored only if its manifest's signature verifies, and progress and
    run records are read only if they verify; without one, nothing is signed nor checked (the
    simulated cloud, whose instances are local processes of the deployment itself).
    """

    def __init__(self, uri: str, backend: Backend | None = None, key: bytes | None = None):
        self.backend = backend or open_backend(uri)
        self.uri = uri
        self.key = key
        self._last_seq = 0

    # -- checkpoints ------------------------------------------------------------------------

    def _listing(self) -> dict[int, list[str]]:
        """seq → keys of that checkpoint (complete or not)."""
        seqs: dict[int, list[str]] = {}
        for key in self.backend.list(CHECKPOINTS):
            part = key[len(CHECKPOINTS) :].split("/", 1)[0]
            if part.isdigit():
                seqs.setdefault(int(part), []).append(key)
        return seqs

    def complete_seqs(self, listing: dict[int, list[str]] | None = None) -> list[int]:
        """Sequence numbers whose manifest has landed, newest first."""
        listing = self._listing() if listing is None else listing
        return sorted((s for s, keys in listing.items() if f"{_seq_key(s)}{MANIFEST}" in keys), reverse=True)

    def continue_after(self, seq: int) -> None:
        """Number the next upload after `seq` (a checkpoint restored from another store)."""
        self._last_seq = max(self._last_seq, int(seq))

    def upload_checkpoint(self, staged: Path, files: list[FileEntry], step: float, total_steps: float) -> int:
        """Upload the files staged in `staged`, then the manifest, then progress.json; prune. Returns the seq."""
        listing = self._listing()
        seq = max([self._last_seq, *listing]) + 1
        base = _seq_key(seq)
        for entry in files:
            self.backend.put_file(staged / entry.path, f"{base}files/{entry.path}")
        manifest = {
            "format": FORMAT,
            "seq": seq,
            "step": step,
            "total_steps": total_steps,
            "files": [e.to_dict() for e in files],
            "created_at": now_iso(),
        }
        if self.key is not None:
            manifest = sign(manifest, self.key)
        self.backend.put_bytes(json.dumps(manifest, indent=1).encode(), f"{base}{MANIFEST}")
        self._last_seq = seq
        self.write_progress(manifest)
        self._prune(listing, seq)
        return seq

    def write_progress(self, manifest: dict) -> None:
        """``progress.json`` naming the checkpoint `manifest` describes (signed with the key, if any).

        The agent writes it after each upload; the controller after it copied a checkpoint into
        another region, so the progress there is the copied checkpoint's and nothing else.
        """
        progress = {
            "step": manifest["step"],
            "total_steps": manifest["total_steps"],
            "seq": manifest["seq"],
            "updated_at": manifest.get("created_at") or now_iso(),
        }
        if self.key is not None:
            progress = sign_claim(progress, self.key, PROGRESS_CLAIM)
        self.backend.put_bytes(json.dumps(progress).encode(), PROGRESS)

    def _prune(self, listing: dict[int, list[str]], new_seq: int) -> None:
        """Keep the `KEEP` newest complete checkpoints; drop older ones and older half-uploads."""
        complete = sorted({new_seq, *self.complete_seqs(listing)}, reverse=True)
        if len(complete) < KEEP:
            return
        oldest_kept = complete[KEEP - 1]
        stale = [key for seq, keys in listing.items() if seq < oldest_kept for key in keys]
        # The manifest first, so a checkpoint being deleted stops counting before its files go.
        stale.sort(key=lambda key: not key.endswith(MANIFEST))
        if stale:
            self.backend.delete(stale)

    def newest(
        self,
        take: Callable[[int, dict, list[FileEntry]], T],
        log: Callable[[str], None] = lambda message: None,
        listing: dict[int, list[str]] | None = None,
    ) -> tuple[dict, T] | None:
        """The newest complete checkpoint whose manifest verifies and that `take` accepts: (its
        manifest, what `take` returned), None when there is none.

        Newest first by sequence number; a checkpoint that fails for any reason of its own (its
        manifest unreadable, unsigned or signed with another key, naming another seq, listing a
        conflicting or unsafe path; or `take` raising ValueError or OSError, e.g. a file missing or
        of another sha256) is logged and skipped for the one before. An OSError of this machine
        (disk full, read-only) is raised: every older one would fail alike. `take(seq, manifest,
        entries)` looks at the files: the agent downloads and hashes them, the controller checks
        that each is there with its size.
        """
        listing = self._listing() if listing is None else listing
        for seq in self.complete_seqs(listing):
            try:
                manifest, entries = self.read_manifest(seq)
                return manifest, take(seq, manifest, entries)
            except (OSError, ValueError) as exc:
                if isinstance(exc, OSError) and exc.errno in _LOCAL_FAULTS:
                    raise
                reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
                log(f"checkpoint {seq} in {self.uri} is not usable ({reason}); trying the one before")
        return None

    def restore(self, target: Path, scratch: Path, log=lambda message: None) -> dict | None:
        """Restore the newest complete checkpoint whose files match its manifest into `target`.

        `target` is replaced only by a fully verified copy (built in `scratch` first); which
        checkpoint that is, and what is skipped, is `newest`'s rule.
        Returns the manifest restored, or None when the store holds no usable checkpoint.
        """
        listing = self._listing()
        if listing:
            self._last_seq = max(listing)

        def download(seq: int, manifest: dict, entries: list[FileEntry]) -> Path:
            attempt = scratch / f"restore-{seq:010d}"
            shutil.rmtree(attempt, ignore_errors=True)
            try:
                self._fetch_files(seq, entries, attempt)
            except BaseException:
                shutil.rmtree(attempt, ignore_errors=True)
                raise
            return attempt

        found = self.newest(download, log, listing)
        if found is None:
            return None
        manifest, attempt = found
        if target.exists():
            retired = scratch / f"replaced-{manifest['seq']:010d}"
            shutil.rmtree(retired, ignore_errors=True)
            target.rename(retired)
            shutil.rmtree(retired, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        attempt.rename(target)
        return manifest

    def read_manifest(self, seq: int) -> tuple[dict, list[FileEntry]]:
        """Checkpoint `seq`'s manifest and its files; ValueError unless it reads, verifies with the
        key (if any), names `seq` and lists files that can be restored as written."""
        base = _seq_key(seq)
        raw = self.backend.get_bytes(f"{base}{MANIFEST}", max_bytes=MAX_MANIFEST_BYTES)
        if raw is None:
            raise ValueError("its manifest vanished")
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"unreadable manifest: {exc}") from exc
        if not isinstance(manifest, dict):
            raise ValueError("unreadable manifest: not a JSON object")
        if self.key is not None:
            verify(manifest, self.key)  # first: nothing an unsigned manifest lists is downloaded
        try:
            if manifest["seq"] != seq:
                raise ValueError(f"it names itself checkpoint {manifest['seq']!r}")
            entries = [_entry(f) for f in manifest["files"]]
            _check_no_conflicts(entries)
            step, total = manifest["step"], manifest["total_steps"]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (step, total)):
                raise TypeError(f"step {step!r} and total_steps {total!r} must be numbers")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"unreadable manifest: {exc}") from exc
        return manifest, entries

    def _fetch_files(self, seq: int, entries: list[FileEntry], into: Path) -> None:
        """Download checkpoint `seq`'s files into `into`, each checked against its size and sha256."""
        base = _seq_key(seq)
        into.mkdir(parents=True)
        for entry in entries:
            local = into / entry.path
            local.parent.mkdir(parents=True, exist_ok=True)
            if not self.backend.get_file(f"{base}files/{entry.path}", local, max_bytes=entry.size):
                raise ValueError(f"{entry.path} is missing")
            if hash_file(local) != (entry.size, entry.sha256):
                raise ValueError(f"{entry.path} does not match its sha256 in the manifest")

    # -- progress, output, run records --------------------------------------------------------

    def read_progress(self) -> dict | None:
        """progress.json; with a key, only if it is this job's signed progress (else None)."""
        return self._read_claim(PROGRESS, PROGRESS_CLAIM)

    def _read_claim(self, name: str, kind: str) -> dict | None:
        try:
            raw = self.backend.get_bytes(name, max_bytes=MAX_CLAIM_BYTES)
            document = None if raw is None else json.loads(raw)
        except ValueError:  # not JSON, or larger than any genuine one (ObjectTooLarge)
            return None
        if self.key is None:
            return document
        return verified_claim(document, self.key, kind)

    def upload_output(self, local: Path, files: list[FileEntry]) -> None:
        """The workload's final files under output/, manifest last (an older output is replaced)."""
        self.backend.delete([f"{OUTPUT}{MANIFEST}"])  # an output being replaced is not complete
        for entry in files:
            self.backend.put_file(local / entry.path, f"{OUTPUT}{entry.path}")
        wanted = {f"{OUTPUT}{e.path}" for e in files}
        stale = [key for key in self.backend.list(OUTPUT) if key not in wanted]
        if stale:
            self.backend.delete(stale)
        manifest = {"format": FORMAT, "files": [e.to_dict() for e in files], "created_at": now_iso()}
        if self.key is not None:
            manifest = sign(manifest, self.key)
        self.backend.put_bytes(json.dumps(manifest, indent=1).encode(), f"{OUTPUT}{MANIFEST}")

    def read_output(self) -> dict | None:
        """``output/MANIFEST.json`` (the workload's final files); with a key, only if it verifies (else None)."""
        try:
            raw = self.backend.get_bytes(f"{OUTPUT}{MANIFEST}", max_bytes=MAX_MANIFEST_BYTES)
            manifest = None if raw is None else json.loads(raw)
        except ValueError:  # not JSON, or larger than any genuine one
            return None
        if not isinstance(manifest, dict):
            return None
        if self.key is not None:
            try:
                verify(manifest, self.key)
            except ValueError:
                return None
        return manifest

    def write_run(self, run_id: str, record: dict) -> None:
        """How run `run_id` ended (signed with the key, if any, naming `run_id`)."""
        if self.key is not None:
            record = sign_claim({**record, "run_id": run_id}, self.key, RUN_CLAIM)
        self.backend.put_bytes(json.dumps(record, indent=1).encode(), f"{RUNS}{run_id}.json")

    def read_run(self, run_id: str) -> dict | None:
        """Run `run_id`'s record; with a key, only this job's signed record of that very run."""
        record = self._read_claim(f"{RUNS}{run_id}.json", RUN_CLAIM)
        if self.key is not None and record is not None and record.get("run_id") != run_id:
            return None  # a genuine record of another run, copied here
        return record

"""The agent's run: restore → start the workload → upload checkpoints → notice, exit or failure.

Why each piece is the way it is:

- **the workload in its own process group** on a real instance, so forwarding the notice
  reaches all of it (a launcher and its ranks) and never the agent; with ``PR_SET_PDEATHSIG``
  (Linux) it dies with the agent. On the simulated cloud (``--notice simulated``) it stays in
  the agent's group instead: there the process group *is* the instance — the supervisor's
  SIGTERM and SIGKILL and `terminate` signal the group — and a workload's own children, which
  a parent-death signal does not reach, must die with it. File descriptors the agent inherited
  are passed on (the simulated cloud's group liveness lock must be held by every member).
- **uploads from the main loop, notices from a thread**: the loop polls the progress file
  every `poll_seconds` (a stat: cheap) and uploads a consistent snapshot when it changed; the
  metadata thread and the signal thread (`Notice.install_signal_handlers`) forward SIGTERM to
  the workload the moment they see a notice, even while an upload runs.
- **within the notice**: the workload gets until the notice's end minus the time an upload
  is expected to take (twice the last one, at most half the notice) to exit; then it is killed
  and its last checkpoint uploaded. A cloud that cuts the upload short leaves a checkpoint
  without its manifest, which is never restored.
- **every exit uploads the last checkpoint**: a failed workload's completed steps are still
  progress; a finished one's final files go to output/.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from airflow_provider_skynomad.agent import (
    CHECKPOINT_DIR_ENV,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_PREEMPTED,
    EXIT_USAGE,
    PROGRESS_FILE,
    PROGRESS_FILE_ENV,
)
from airflow_provider_skynomad.agent.notice import MetadataWatcher, Notice
from airflow_provider_skynomad.agent.signing import KEY_ENV
from airflow_provider_skynomad.agent.snapshot import Progress, hash_all, read_progress, take, write_progress
from airflow_provider_skynomad.agent.store import CheckpointStore, StoreError, now_iso
from airflow_provider_skynomad.workload import TRAIN_MODULE

STDERR_TAIL_LINES = 20
START_WALL_ENV = "SKYNOMAD_WORKLOAD_START_WALL"  # the simulated cloud's end of the cold start (epoch seconds)
RESTORED_MARKER_ENV = "SKYNOMAD_RESTORED_MARKER"  # a file the agent creates once the checkpoint is restored
SCRATCH = ".skynomad-agent"  # under the work dir: staging and restore attempts


def log(message: str) -> None:
    print(f"skynomad agent: {message}", file=sys.stderr, flush=True)


class AgentConfig:
    """What `cli` parsed (a plain class: dataclasses would import `inspect`, ~10 ms of every start)."""

    def __init__(
        self,
        store: str,
        work_dir: Path,
        run_id: str,
        command: list[str],
        notice: str = "none",
        rank: int = 0,
        poll_seconds: float = 2.0,
        notice_seconds: float = 30.0,
        env: dict[str, str] | None = None,
        checkpoint_key: bytes | None = None,
        restore_from: str | None = None,
    ):
        self.store, self.work_dir, self.run_id, self.command = store, Path(work_dir), run_id, list(command)
        self.notice, self.rank, self.poll_seconds, self.notice_seconds = notice, rank, poll_seconds, notice_seconds
        # The workload's environment never carries the job's checkpoint key: only the agent signs.
        self.env = {k: v for k, v in (os.environ if env is None else env).items() if k != KEY_ENV}
        self.checkpoint_key = checkpoint_key
        self.restore_from = restore_from if restore_from and restore_from != store else None

    def __repr__(self) -> str:  # no key in any log line or traceback
        return f"AgentConfig(store={self.store!r}, run_id={self.run_id!r}, signed={self.checkpoint_key is not None})"


class Agent:
    def __init__(self, config: AgentConfig, store: CheckpointStore | None = None):
        self.config = config
        self.uploads = config.rank == 0
        self.work_dir = config.work_dir.resolve()
        self.checkpoint_dir = self.work_dir / "checkpoint"
        self.progress_file = self.checkpoint_dir / PROGRESS_FILE
        self.scratch = self.work_dir / SCRATCH
        self.store = store
        self.child: subprocess.Popen | None = None
        self.own_group = False
        self.wake = threading.Event()  # set on a notice, a rebalance, or the workload's exit: the loop looks now
        self.notice = Notice(config.notice_seconds, self._forward_notice)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.uploaded: Progress | None = None  # the newest progress the store holds (restored or uploaded)
        self.last_upload_at: float | None = None
        self.upload_seconds = 0.0  # how long the last checkpoint upload took
        self.started_at = time.time()
        self.restored_step = None
        self._progress_stat = None
        self._rebalance = threading.Event()
        self._reported_skips: set[tuple[str, str]] = set()  # what the symlink rule left out, logged once

    # -- the run --------------------------------------------------------------------------

    def run(self) -> int:
        inherited = _inherited_fds()  # before anything of ours is opened
        self.notice.install_signal_handlers()
        start_wall = workload_start_wall()
        early = start_wall is not None and waits_for_restore(self.config.command)
        if early:  # its imports overlap the cold start; it reads its checkpoint only after the restore
            try:
                self._start(inherited, restored_marker=True)
            except OSError as exc:
                log(f"cannot start the workload {self.config.command[:1]}: {exc}")
                self.stderr_tail.append(f"cannot start the workload: {exc}")
                return self._finish("failed", 127)
        if start_wall is not None and self.notice.event.wait(max(0.0, start_wall - time.time())):
            self._stop_early_workload(early)
            return self._finish("preempted", None)  # the cold start was cut short
        try:
            self._restore()
        except (StoreError, OSError, ValueError) as exc:
            log(f"cannot restore from {self.config.store}: {exc}")
            self._stop_early_workload(early)
            return EXIT_USAGE
        except Exception as exc:  # the SDK's own errors: no bucket, no access, no endpoint
            log(f"cannot restore from {self.config.store}: {type(exc).__name__}: {exc}")
            self._stop_early_workload(early)
            return EXIT_USAGE
        if early:
            self.restored_marker.touch()
        if self.notice.event.is_set() and not early:
            return self._finish("preempted", None)  # noticed before the workload ever started
        try:
            if not early:
                self._start(inherited)
        except OSError as exc:
            log(f"cannot start the workload {self.config.command[:1]}: {exc}")
            self.stderr_tail.append(f"cannot start the workload: {exc}")
            return self._finish("failed", 127)
        if self.config.notice in ("aws", "gcp"):
            MetadataWatcher(self.config.notice, self.notice, self.config.poll_seconds, self._on_rebalance, log).start()
        return self._watch()

    def _restore(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        if self.store is None:
            self.store = CheckpointStore(self.config.store, key=self.config.checkpoint_key)
        manifest = self.store.restore(self.checkpoint_dir, self.scratch, log)
        if manifest is None and self.config.restore_from:
            # A new instance writes under its own name (docs/agent.md, "Where an instance writes"):
            # it starts from the checkpoint the controller found newest, and numbers on after it.
            source = CheckpointStore(self.config.restore_from, key=self.config.checkpoint_key)
            manifest = source.restore(self.checkpoint_dir, self.scratch, log)
            if manifest is not None:
                self.store.continue_after(manifest["seq"])
                log(f"restored from {self.config.restore_from}")
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if manifest is None:
            return
        write_progress(self.progress_file, manifest["step"], manifest["total_steps"])
        self.uploaded = read_progress(self.progress_file)
        self.restored_step = manifest["step"]
        self._progress_stat = _stat(self.progress_file)
        log(f"restored checkpoint {manifest['seq']} (step {manifest['step']} of {manifest['total_steps']})")

    def _stop_early_workload(self, early: bool) -> None:
        if early and self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()

    @property
    def restored_marker(self) -> Path:
        return self.scratch / "restored"

    def _start(self, inherited: tuple[int, ...], restored_marker: bool = False) -> None:
        env = {
            **self.config.env,
            CHECKPOINT_DIR_ENV: str(self.checkpoint_dir),
            PROGRESS_FILE_ENV: str(self.progress_file),
        }
        if restored_marker:  # the workload reads its checkpoint only once this file exists
            self.scratch.mkdir(parents=True, exist_ok=True)
            self.restored_marker.unlink(missing_ok=True)
            env[RESTORED_MARKER_ENV] = str(self.restored_marker)
        preexec, self.own_group = _preexec(own_group=self.config.notice != "simulated")
        self.child = subprocess.Popen(
            self.config.command,
            cwd=self.work_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=inherited,
            preexec_fn=preexec,
        )
        self._pump = threading.Thread(target=self._pump_stderr, name="skynomad-stderr", daemon=True)
        self._pump.start()
        threading.Thread(target=self._wait_workload, name="skynomad-wait", daemon=True).start()

    def _watch(self) -> int:
        poll = self.config.poll_seconds
        while True:
            code = self.child.poll()
            if code is not None:
                return self._exited(code)
            if self.notice.event.is_set():
                return self._on_notice()
            if self._rebalance.is_set():
                self._rebalance.clear()
                log("rebalance recommendation: uploading the newest checkpoint now")
                self._progress_stat = None  # look at the progress file whatever its stat says
            self._maybe_upload()
            self.wake.wait(poll)
            self.wake.clear()  # then every condition is looked at again: nothing set meanwhile is lost

    def _exited(self, code: int) -> int:
        # Lines written before the exit are read at once; EOF can wait forever on a grandchild
        # that still holds the pipe, and at 3600x every wall second here is a simulated hour.
        self._pump.join(timeout=0.5)
        progress = read_progress(self.progress_file)
        if self.notice.event.is_set() and not (code == 0 and progress is not None and progress.done):
            return self._on_notice()  # stopped by the notice (even if it exited 0 without finishing)
        self._maybe_upload(force=True)
        if code == 0:
            if self.uploads and not self._upload_output():
                return self._finish("failed", 0)  # no output where the adapters look: not a success
            return self._finish("finished", 0)
        lines = list(self.stderr_tail)
        log(f"the workload exited {code}; the last {len(lines)} lines of its stderr:")
        for line in lines:
            print(f"  {line}", file=sys.stderr)
        sys.stderr.flush()
        return self._finish("failed", code)

    def _on_notice(self) -> int:
        notice_len = max(self.notice.deadline - self.notice.at, 0.0)
        reserve = min(notice_len / 2, 2 * self.upload_seconds + notice_len / 20)
        log(f"interruption notice ({self.notice.source}); the workload has {notice_len - reserve:.3g} s to stop")
        code = self.child.poll()
        if code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.child.wait(timeout=max(self.notice.deadline - reserve - time.time(), 0.0))
        if code is None:
            self._signal_workload(signal.SIGKILL)
            code = self.child.wait()
        self._pump.join(timeout=min(max(self.notice.deadline - time.time(), 0.0), 1.0))
        progress = read_progress(self.progress_file)
        if code == 0 and progress is not None and progress.done:
            return self._exited(code)  # it finished its last step within the notice
        self._maybe_upload(force=True)
        return self._finish("preempted", code)

    # -- uploads ----------------------------------------------------------------------------

    def _maybe_upload(self, force: bool = False) -> None:
        """Upload a snapshot if the progress file moved past what the store holds."""
        if not self.uploads:
            return
        stat = _stat(self.progress_file)
        if stat is None or (stat == self._progress_stat and not force):
            return
        progress = read_progress(self.progress_file)
        if progress is None or not self._newer(progress):
            self._progress_stat = stat
            return
        started = time.time()
        try:
            snapshot = take(self.checkpoint_dir, self.progress_file, self.scratch / "staging")
        except OSError as exc:  # e.g. the local disk is full: the workload may still finish; say so, retry
            log(f"cannot copy the checkpoint in {self.checkpoint_dir}: {exc}")
            return
        if snapshot is None:
            return  # it kept moving: the next poll tries again
        for rel, why in snapshot.skipped:
            if (rel, why) not in self._reported_skips:
                self._reported_skips.add((rel, why))
                log(f"left out of the checkpoint: {rel} ({why}; see 'Symbolic links' in docs/agent.md)")
        if not self._newer(snapshot.progress):
            self._progress_stat = stat
            return
        p = snapshot.progress
        ok = self._try(
            f"uploading checkpoint step {p.step}",
            lambda: self.store.upload_checkpoint(snapshot.staged, snapshot.files, p.step, p.total_steps),
        )
        if ok:
            self.last_upload_at = time.time()
            self.upload_seconds = self.last_upload_at - started
            self.uploaded = p
            self._progress_stat = stat

    def _newer(self, progress: Progress) -> bool:
        done = self.uploaded
        return done is None or progress.total_steps != done.total_steps or progress.step > done.step

    def _upload_output(self, attempts: int = 3) -> bool:
        """The checkpoint directory as the workload left it, to output/ (a few tries: it is the job's result)."""
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(2.0, self.config.poll_seconds * 10) * attempt)
            if self._try(
                "uploading the output",
                lambda: self.store.upload_output(self.checkpoint_dir, hash_all(self.checkpoint_dir)),
            ):
                return True
        self.stderr_tail.append(f"skynomad agent: the workload's output could not be uploaded to {self.config.store}")
        return False

    def _try(self, what: str, action) -> bool:
        try:
            action()
        except Exception as exc:  # the store may be unreachable for a moment: the next poll retries
            log(f"{what} to {self.config.store} failed: {type(exc).__name__}: {exc}")
            return False
        return True

    # -- the end ----------------------------------------------------------------------------

    def _finish(self, outcome: str, code: int | None) -> int:
        ended = time.time()
        if self.child is not None:
            self._signal_workload(signal.SIGKILL)  # stragglers of the workload: the instance is ours to leave
        if self.uploads:
            notice_at = self.notice.at
            record = {
                "run_id": self.config.run_id,
                "rank": self.config.rank,
                "outcome": outcome,
                "exit_code": code,
                "stderr_tail": list(self.stderr_tail) if outcome == "failed" else [],
                "notice_at": None if notice_at is None else now_iso(notice_at),
                "notice_source": self.notice.source,
                "notice_to_upload_seconds": None if notice_at is None else round(ended - notice_at, 6),
                "last_upload_at": None if self.last_upload_at is None else now_iso(self.last_upload_at),
                "step": None if self.uploaded is None else self.uploaded.step,
                "total_steps": None if self.uploaded is None else self.uploaded.total_steps,
                "restored_step": self.restored_step,
                "started_at": now_iso(self.started_at),
                "ended_at": now_iso(ended),
            }
            self._try("writing the run record", lambda: self.store.write_run(self.config.run_id, record))
        shutil.rmtree(self.scratch / "staging", ignore_errors=True)
        codes = {"finished": EXIT_FINISHED, "failed": EXIT_FAILED, "preempted": EXIT_PREEMPTED}
        log(f"{outcome} (workload exit {code})")
        return codes[outcome]

    def _forward_notice(self) -> None:
        if self.child is not None and self.child.returncode is None:
            self._signal_workload(signal.SIGTERM)
        self.wake.set()

    def _on_rebalance(self) -> None:
        self._rebalance.set()
        self.wake.set()

    def _wait_workload(self) -> None:
        with contextlib.suppress(Exception):
            self.child.wait()
        self.wake.set()

    def _signal_workload(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.own_group:
                os.killpg(self.child.pid, signum)
            elif self.child.poll() is None:
                os.kill(self.child.pid, signum)

    def _pump_stderr(self) -> None:
        """Pass the workload's stderr through (to the instance's log) and keep its last lines."""
        out = sys.stderr.buffer
        for raw in self.child.stderr:
            with contextlib.suppress(OSError, ValueError):
                out.write(raw)
                out.flush()
            self.stderr_tail.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))


def workload_start_wall() -> float | None:
    """When the simulated cloud's cold start ends (its launcher sets it); None on a real instance."""
    try:
        return float(os.environ[START_WALL_ENV])
    except (KeyError, ValueError):
        return None


def waits_for_restore(command) -> bool:
    """The command is the bundled training loop, which waits for `RESTORED_MARKER_ENV` before it
    reads its checkpoint; any other workload starts only after the restore."""
    argv = list(command)
    return any(a == "-m" and b == TRAIN_MODULE for a, b in zip(argv, argv[1:], strict=False))


def _stat(path: Path):
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _inherited_fds() -> tuple[int, ...]:
    """Descriptors above stderr this process inherited as inheritable (passed on to the workload)."""
    try:
        names = os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")
    except OSError:
        return ()
    found = []
    for name in names:
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):
                if os.get_inheritable(fd):
                    found.append(fd)
    return tuple(sorted(found))


def _preexec(own_group: bool):
    """(preexec_fn, own process group?): die with the agent, and (if `own_group`) a group of its own — on Linux.

    Without PR_SET_PDEATHSIG a workload in its own group would outlive a SIGKILLed agent, so
    on other systems it stays in the agent's group, where a signal to the group reaches it.
    """
    if not sys.platform.startswith("linux"):
        return None, False
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        if own_group:
            os.setpgid(0, 0)
        prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() != parent:  # the agent died before the prctl: die too
            os._exit(137)

    return preexec, own_group

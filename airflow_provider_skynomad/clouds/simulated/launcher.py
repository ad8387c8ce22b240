"""How the simulated cloud runs a workload: a small supervisor process per group.

Why a supervisor rather than launching the command directly:

- **cold start** — the workload must not make progress before the cold start has elapsed on
  the simulated clock. The supervisor starts the agent at launch, with that wall time in
  ``SKYNOMAD_WORKLOAD_START_WALL``: the agent waits for it before it restores, and the bundled
  training loop (started early by the agent) waits for the restore. So interpreter and library
  start-up overlap the cold start, as a VM's boot does, instead of being simulated hours of their
  own on an accelerated clock (at 600x, 5 s of imports on a busy box would be 0.8 h);
- **exit status across processes** — only a parent can reap a child, but the trigger that
  polls is not the worker that launched; the supervisor records the exit code and the wall
  time of the exit in `exit.json`, which any process can read. The command it runs is the
  workload agent around the workload (`SimulatedCloud` builds it); the code recorded is the
  *workload's*, from the agent's run record (`run_record`), so "exited 3" means what the
  workload said, not the agent's code for it; the agent's own code is kept beside it;
- **preempted on time** — the group's capacity loss as known at launch is the earliest it can
  be (groups launched before it can only end sooner than assumed, which moves it later,
  `capacity.py`); at that instant the supervisor derives it again from the group
  directories and either SIGTERMs the group (SIGKILL after the notice) or sleeps until the new
  instant, so the workload makes no progress the trace would not allow, however rarely anyone
  polls, and stops at the instant the cloud's records say;
- **dies with the group** — it runs in its own session (process group), so one `killpg`
  stops it and the workload together; a SIGTERM from outside also starts the notice, and
  when the workload ends the supervisor kills any stragglers;
- **liveness without zombies** — the supervisor double-forks (the launching process reaps
  the short-lived middle process at once), and the group holds an exclusive `flock` on
  `alive.lock` for as long as any member lives. Locks are released when a process dies,
  even while it lingers as a zombie, so "lock free" reliably means "group gone" even where
  nobody reaps orphans.
- **discoverable** — before it forks, the supervisor writes its process group id to
  `pgid.json` in the group directory, so a group whose launcher crashed before recording it
  is still found (and can be killed) from its directory alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from airflow_provider_skynomad.clouds.simulated.capacity import has_claim, loss_wall
from airflow_provider_skynomad.utils.files import atomic_write_json

SPEC_FILE = "launch.json"
EXIT_FILE = "exit.json"
ALIVE_FILE = "alive.lock"
LOG_FILE = "workload.log"
PGID_FILE = "pgid.json"
WORK_DIR = "work"  # the group's local disk, the agent's --work-dir
_LAUNCHER_TIMEOUT_SECONDS = 60


def spawn_group(
    group_dir: Path,
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    start_at_wall: float,
    notice_wall_seconds: float,
    preempt_at_wall: float | None = None,
    hold_fd: int | None = None,
    run_record: Path | None = None,
) -> int:
    """Start the supervisor for one group; return its process group id (to signal the group).

    `hold_fd` (a locked file's descriptor) is inherited by the supervisor and closed only once
    it has written `pgid.json`: whoever holds that lock next knows the group is discoverable
    from its directory, or never started, even if the launcher died in between.

    `env` reaches the workload through the process environment only: it is never written to
    disk (it holds the job's own variables, which are the job's business).

    `run_record` is where the agent records how the workload ended (its exit code is what
    `exit.json` reports); without one, the command's own exit code is reported.
    """
    group_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "command": list(command),
        "cwd": str(cwd),
        "start_at_wall": start_at_wall,
        "notice_wall_seconds": notice_wall_seconds,
        "preempt_at_wall": preempt_at_wall,
        "run_record": None if run_record is None else str(run_record),
    }
    atomic_write_json(group_dir / SPEC_FILE, spec)
    with open(group_dir / LOG_FILE, "ab") as log:
        middle = subprocess.Popen(
            [sys.executable, "-m", __name__, str(group_dir), *([] if hold_fd is None else [str(hold_fd)])],
            pass_fds=() if hold_fd is None else (hold_fd,),
            start_new_session=True,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
        )
    returncode = middle.wait(timeout=_LAUNCHER_TIMEOUT_SECONDS)
    if returncode != 0:
        raise RuntimeError(
            f"simulated cloud: the group supervisor failed to start (exit {returncode}); see {group_dir / LOG_FILE}"
        )
    return middle.pid  # the session leader's id is the group id, valid while any member lives


def group_alive(group_dir: Path) -> bool:
    """Whether any process of the group is still alive (it holds the group's flock)."""
    try:
        fd = os.open(group_dir / ALIVE_FILE, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # closing also releases the lock if we just took it
    return False


def signal_group(pgid: int, group_dir: Path, signum: int) -> None:
    """Send `signum` to every process of the group, if it still has any (never to a reused id)."""
    if not group_alive(group_dir):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def read_pgid(group_dir: Path) -> int | None:
    """The group's process group id, once its supervisor has started (None: it never did, yet)."""
    try:
        with open(group_dir / PGID_FILE) as handle:
            return int(json.load(handle)["pgid"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def log_tail(group_dir: Path, lines: int, max_bytes: int = 64 * 1024) -> list[str]:
    """The last `lines` lines of the group's `workload.log` (read from its last `max_bytes`)."""
    try:
        with open(group_dir / LOG_FILE, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:
        text = text.split("\n", 1)[-1]  # the first line read may be cut
    return text.splitlines()[-lines:] if lines > 0 else []


def read_exit(group_dir: Path) -> dict | None:
    """{"returncode", "ended_at_wall"} once the workload has exited, else None."""
    try:
        with open(group_dir / EXIT_FILE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def _supervise(group_dir: Path, alive_fd: int) -> None:
    """Runs in the group: wait out the cold start, run the workload, preempt it on time, record its end.

    `preempt_at_wall` is the group's capacity loss as known at launch: when it comes, the loss is
    derived again (`_preempt_after`); the supervisor stops the workload at the loss itself, so
    the workload never makes progress the trace would not allow, however rarely anyone polls.
    Stopping = SIGTERM to the group, SIGKILL after the notice.
    """
    spec = json.loads((group_dir / SPEC_FILE).read_text())
    notice = float(spec["notice_wall_seconds"])
    start_at = float(spec["start_at_wall"])
    preempt_at = spec.get("preempt_at_wall")
    state: dict = {"child": None, "stopping": False}

    def stop(send_term: bool) -> None:
        if state["child"] is None:
            os._exit(0)  # still in the cold start: there is no workload to give notice to
        if state["stopping"]:
            return
        state["stopping"] = True
        if send_term:
            os.killpg(0, signal.SIGTERM)  # reaches this process too; `stopping` makes that a no-op
        signal.setitimer(signal.ITIMER_REAL, max(notice, 1e-3))

    def on_term(signum, frame):
        stop(send_term=False)  # sent to the whole group already

    def on_alarm(signum, frame):
        if state["stopping"]:
            os.killpg(0, signal.SIGKILL)  # the notice is over
            return
        at = _loss_now(group_dir, preempt_at)
        if at is None:
            return  # older groups ended first: no loss left in the trace
        if at > time.time():
            signal.setitimer(signal.ITIMER_REAL, at - time.time())  # older groups ended first: later
        else:
            stop(send_term=True)  # the capacity loss

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGALRM, on_alarm)
    while preempt_at is not None and preempt_at <= start_at:
        _sleep_until(preempt_at)
        at = _loss_now(group_dir, preempt_at)
        if at is not None and at <= time.time():
            os._exit(0)  # preempted during the cold start
        preempt_at = at
    # Block our signals while starting the child, so the handlers always see it once it exists.
    signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
    try:
        state["child"] = subprocess.Popen(
            spec["command"],
            cwd=spec["cwd"],
            env={**os.environ, "SKYNOMAD_WORKLOAD_START_WALL": repr(start_at)},
            stdin=subprocess.DEVNULL,
            pass_fds=(alive_fd,),
            preexec_fn=_unblock,  # the mask is inherited: give the workload normal signals
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"simulated cloud: cannot start workload {spec['command']!r}: {exc}", file=sys.stderr, flush=True)
        returncode = 127
    else:
        if preempt_at is not None:
            signal.setitimer(signal.ITIMER_REAL, max(preempt_at - time.time(), 1e-3))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)
        returncode = state["child"].wait()
    ended = {"returncode": returncode, "ended_at_wall": time.time()}
    if spec.get("run_record"):
        ended.update(_workload_exit(Path(spec["run_record"]), returncode))
    atomic_write_json(group_dir / EXIT_FILE, ended)
    os.killpg(0, signal.SIGKILL)  # the group ends with its workload: no stragglers, no orphans


_HANDLED = {signal.SIGTERM, signal.SIGALRM}


def _loss_now(group_dir: Path, given: float | None) -> float | None:
    """The group's capacity loss (wall) derived again now; `given` (the launch's) for a group without
    a claim, or if the group directories cannot be read (it runs in a signal handler: never raise)."""
    try:
        return loss_wall(group_dir) if has_claim(group_dir) else given
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"simulated cloud: cannot derive the capacity loss again ({exc}); keeping {given}", file=sys.stderr)
        return given


def _workload_exit(run_record: Path, agent_code: int) -> dict:
    """The workload's exit code from the agent's run record, beside the agent's own code.

    Only a record written by this run counts (the agent writes it just before it exits): with no
    readable record — the agent failed on its own arguments or store (exit 2), or was killed —
    the agent's code is the group's.
    """
    try:
        record = json.loads(run_record.read_text())
        code = record["exit_code"]
    except (OSError, ValueError, KeyError, TypeError):
        return {"agent_exit_code": agent_code}
    if agent_code not in (0, 1, 3) or not isinstance(code, int) or isinstance(code, bool):
        return {"agent_exit_code": agent_code}
    return {"returncode": code, "agent_exit_code": agent_code, "outcome": record.get("outcome")}


def _unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)


def _sleep_until(wall: float) -> None:
    while (remaining := wall - time.time()) > 0:
        time.sleep(remaining)


def main(argv: list[str]) -> None:
    group_dir = Path(argv[0])
    alive_fd = os.open(group_dir / ALIVE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(alive_fd, fcntl.LOCK_EX)  # before the fork: the lock is held from the launch on
    atomic_write_json(group_dir / PGID_FILE, {"pgid": os.getpgrp()})  # after the lock: found ⇒ lock meaningful
    if len(argv) > 1:
        os.close(int(argv[1]))  # the launcher's lock: the group is discoverable now
    if os.fork() > 0:
        os._exit(0)
    _supervise(group_dir, alive_fd)


if __name__ == "__main__":
    main(sys.argv[1:])

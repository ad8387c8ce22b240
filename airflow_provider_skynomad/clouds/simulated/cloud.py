"""SimulatedCloud: a trace replayed on an accelerated clock, the embedded default cloud.

Everything runs with no cloud account, yet the operator and trigger exercise the real code
paths: a spot launch is refused when the trace has no capacity left for it, a running spot
group is preempted when the trace loses capacity (the workload gets SIGTERM, then SIGKILL after
the notice), the workload is a real subprocess that checkpoints into a directory of its *job* in
its zone, and every group, probe and checkpoint copy is billed at the trace's prices.

All state — the clock's epoch, the groups, the bill — lives in `state_dir`, so the worker
that launches, the triggerer that polls, a retried task and a test in another process all
see one cloud. Group status is derived, not sampled: a preemption happens at the trace's
capacity-loss instant and billing stops there, however late someone polls.

Spot capacity is shared (`market.capacity`, `capacity.py`): a zone's capacity at an instant
is the trace's `available`, every running spot group of the zone and instance type holds its
count of it, a launch beyond what is left is refused (`CapacityError`), a probe is granted only
what is left, and when the trace drops below what is held the youngest groups are taken back
first. One job alone in its zones sees exactly the trace.

Layout of `state_dir`::

    cloud.json, cloud.lock     clock epoch, speed, trace, the cloud's id and where its state is
                               (written once, under the lock; every process reads it)
    state.db                   groups, client tokens, probes, egress: a SQLite database, one row
                               per group (`store.py`), unless `state_url` names another
    launches/<hash>.lock       one per client token: one launcher at a time; held by a new group's
                               supervisor until its pgid.json exists (see `SimulatedCloud.launch`)
    capacity/<hash>.lock       one per zone and instance type: one spot launch's capacity check at a time
    groups/<id>/               a spot group's capacity.json (its claim) and ended.json (`capacity.py`);
                               the supervisor's launch.json, pgid.json, exit.json, alive.lock,
                               workload.log (the agent's and the workload's stdout and stderr),
                               home/ (its HOME), work/ (the instance's local disk: the workload's
                               cwd; work/checkpoint is its SKYNOMAD_CHECKPOINT_DIR)
    jobs/<job_id>/<zone>/checkpoint/
                               the job's checkpoint store in that zone (`file://` prefix of the
                               workload agent, docs/agent.md): checkpoints/, progress.json (what
                               `progress` reads), output/, runs/<client token>.json

Every group runs the workload agent around its command, as an instance does: it restores the
job's newest complete checkpoint from the zone's store into the group's work dir, uploads each
checkpoint the workload completes, and on the notice (the supervisor's SIGTERM) stops the
workload and uploads its last checkpoint. So the demo and the tests exercise the agent.

Checkpoints belong to a job: two jobs in one zone never see each other's files, and a copy
moves one job's checkpoint only. Every launch must name its job (`LaunchRequest.job_id`).

The workload's environment is the job's own, not this host's (which may hold connection
passwords): see `HOST_ENV_KEPT` for the few host variables a process needs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from airflow_provider_skynomad.agent.notice import NOTICE_SECONDS_ENV
from airflow_provider_skynomad.clouds.base import (
    PROBE_KINDS,
    PROBE_LAUNCH,
    REQUEST_FULFILLED_SHARE,
    CapacityError,
    Cloud,
    GroupHandle,
    GroupStatus,
    LaunchRequest,
    ProbeResult,
    Resource,
    check_probe_kind,
)
from airflow_provider_skynomad.clouds.simulated.clock import SimClock, open_shared_clock, read_shared_settings
from airflow_provider_skynomad.clouds.simulated.groups import (
    CLIENT_TOKEN_TAG,
    NOT_ENDED,
    SPAWNING,
    GroupTracker,
    end,
    handle_of,
    new_record,
    same_request,
)
from airflow_provider_skynomad.clouds.simulated.launcher import WORK_DIR, group_alive, log_tail, spawn_group
from airflow_provider_skynomad.clouds.simulated.market import TraceMarket
from airflow_provider_skynomad.clouds.simulated.store import (
    StateStore,
    default_state_url,
    display_url,
    exclusive,
    open_database,
)
from airflow_provider_skynomad.exceptions import TraceEndedError
from airflow_provider_skynomad.market.capacity import Holding, left
from airflow_provider_skynomad.market.egress import EgressModel

COLD_START_ENV = "SKYNOMAD_COLD_START_HOURS"
DEFAULT_COLD_START_HOURS = 0.2
PROBE_HOURS = 1.0 / 60.0  # a probe holds what it was granted for one simulated minute


def request_race_billed(zone: str, grid_hours: float, granted: int) -> int:
    """How many of a request probe's `granted` instances the simulated cloud bills because they ran
    before the delete landed (the race): each one with the chance of the prior race share
    `clouds.base.REQUEST_FULFILLED_SHARE`, drawn from a hash of (zone, time, instance) so a
    replay bills the same probes every time."""
    import zlib

    draws = (zlib.crc32(f"{zone}|{grid_hours:.9f}|{i}".encode()) / 2**32 for i in range(granted))
    return sum(1 for draw in draws if draw < REQUEST_FULFILLED_SHARE)


FAILURE_DETAIL_LINES = 20
# The only host variables a workload gets: what any process needs to find programs and modules
# and to read and write text. Everything else of the host (AIRFLOW_CONN_*, cloud keys, ...) stays
# out; what a job needs goes in its request's env. HOME is not the host's: each group gets its own
# (groups/<id>/home), as an instance would, so SDKs cannot pick up the host's credential files
# (~/.aws, ~/.config/gcloud, ~/.netrc, ~/.pgpass) through it, while tools that need a HOME have one.
HOST_ENV_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH")
HOST_ENV_KEPT_PREFIXES = ("LC_",)
_SETTINGS = ("trace_path", "speed", "trace_start", "preemption_notice_seconds")
_MASKED = "***"  # how `display_url` shows a password
LEGACY_STATE_FILE = "state.json"  # where a state directory of an earlier version kept its state
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # one safe path component
__all__ = [
    "CLIENT_TOKEN_TAG",
    "COLD_START_ENV",
    "DEFAULT_COLD_START_HOURS",
    "HOST_ENV_KEPT",
    "SimulatedCloud",
    "TraceEndedError",
]


class SimulatedCloud(Cloud):
    """Replay `trace_path` on a clock running `speed` simulated seconds per wall second.

    :param trace_path: a trace in the market-observation format (docs/market.md).
    :param state_dir: shared state; every process opening it sees the same clock and groups.
    :param speed: simulated seconds per wall second (3600: one simulated hour per second).
    :param trace_start: the trace instant at the clock's epoch (hour 0): a timestamp, or hours
        after the trace's first observation; default the first observation.
    :param preemption_notice_seconds: simulated seconds between SIGTERM and SIGKILL on preemption.
    :param egress_usd_per_gb: `(source_zone, target_zone) -> USD/GB` for checkpoint copies;
        default: the public list prices of market.egress, the ones the planner plans with.
    :param state_url: SQLAlchemy URL of the database that keeps the groups, probes and bill
        (e.g. ``postgresql://user@host/db``); default: ``state.db``, a SQLite file in `state_dir`.
        Fixed when the state directory is first opened (`cloud.json` keeps it with its password
        masked); it may hold a password: never log it, `display_state_url` is safe to.
    """

    name = "simulated"
    probe_kinds = PROBE_KINDS  # a replay can do what either real cloud does

    def __init__(
        self,
        trace_path: str | Path,
        state_dir: str | Path,
        speed: float = 3600.0,
        trace_start: str | pd.Timestamp | float | None = None,
        preemption_notice_seconds: float = 30.0,
        egress_usd_per_gb: Callable[[str, str], float] | None = None,
        state_url: str | None = None,
        deployment_id: str | None = None,
    ):
        from airflow_provider_skynomad.clouds.tags import check_deployment_id

        self.deployment_id = check_deployment_id(deployment_id)
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number of simulated seconds per wall second, got {speed!r}")
        if not preemption_notice_seconds >= 0:
            raise ValueError(f"preemption_notice_seconds must be ≥ 0, got {preemption_notice_seconds!r}")
        self.trace_path = Path(trace_path).expanduser().resolve()
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.market = TraceMarket.load(self.trace_path)
        wanted = {
            "trace_path": str(self.trace_path),
            "speed": float(speed),
            "trace_start": self._resolve_start(trace_start).isoformat(),
            "preemption_notice_seconds": float(preemption_notice_seconds),
            "state_url": display_url(state_url),
        }
        url = state_url or default_state_url(self.state_dir)
        open_database(url)  # before the clock starts (a new state's first launch is at hour ~0)
        config = open_shared_clock(self.state_dir, wanted)
        self.speed = config["speed"]
        self.preemption_notice_seconds = config["preemption_notice_seconds"]
        self.clock = SimClock(config["epoch_wall"], self.speed, pd.Timestamp(config["trace_start"]))
        self._groups = GroupTracker(self.market, self.clock, self.preemption_notice_seconds)
        self._egress_usd_per_gb = egress_usd_per_gb or self.default_egress_usd_per_gb
        self.state_url = state_url
        cloud_id = config.get("cloud_id") or hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:32]
        self._store = StateStore(url, cloud_id)
        legacy = self.state_dir / LEGACY_STATE_FILE
        if legacy.exists():
            with exclusive(self.state_dir / "cloud.lock"):
                self._store.import_legacy(legacy)

    @classmethod
    def attach(
        cls,
        state_dir: str | Path,
        egress_usd_per_gb: Callable[[str, str], float] | None = None,
        state_url: str | None = None,
    ) -> SimulatedCloud:
        """Open an existing state directory with the settings it was created with.

        A state database whose URL holds a password is not found from `cloud.json` alone (it keeps
        the password masked): pass `state_url` then.
        """
        settings = read_shared_settings(Path(state_dir).expanduser())
        recorded = settings.get("state_url")
        if state_url is None and recorded is not None:
            if _MASKED in recorded:
                raise ValueError(
                    f"{state_dir} keeps its state in {recorded}, whose password is not stored: "
                    "pass state_url (the same URL with its password) to attach"
                )
            state_url = recorded
        fixed = {k: settings[k] for k in _SETTINGS}
        return cls(state_dir=state_dir, egress_usd_per_gb=egress_usd_per_gb, state_url=state_url, **fixed)

    def to_config(self) -> dict:
        """Plain-data constructor arguments (e.g. for trigger kwargs); the egress function is not included.

        `state_url` is given with its password masked (plain data travels into logs and task
        state); a cloud made from it again needs the password from where it came (the connection).
        """
        return {
            "trace_path": str(self.trace_path),
            "state_dir": str(self.state_dir),
            "speed": self.speed,
            "trace_start": self.clock.start.isoformat(),
            "preemption_notice_seconds": self.preemption_notice_seconds,
            "state_url": self.display_state_url,
            "deployment_id": self.deployment_id,
        }

    @property
    def display_state_url(self) -> str | None:
        """Where the state is (None: `state_dir`'s SQLite file), its password masked: safe to log."""
        return display_url(self.state_url)

    # -- clock ------------------------------------------------------------------------------

    def now_hours(self) -> float:
        """Simulated hours since the clock's epoch (the trace instant `trace_start`)."""
        return self.clock.now_hours()

    def now_timestamp(self) -> pd.Timestamp:
        """The simulated instant as a UTC trace timestamp."""
        return self.clock.now()

    @property
    def trace_end(self) -> pd.Timestamp:
        """The trace instant after which there is no market to replay (probes and launches then raise
        TraceEndedError); a job's start check names it when the market table went stale for that reason."""
        return self.market.grid.start + pd.Timedelta(hours=self.market.end_hours)

    def sleep_until_simulated(self, hours: float) -> None:
        """Block until `now_hours()` ≥ `hours`."""
        self.clock.sleep_until(hours)

    # -- Cloud interface --------------------------------------------------------------------

    def find(self, client_token: str) -> GroupHandle | None:
        """The group launched with `client_token`, without launching anything (None: there is none).

        A group being started right now is found; a record a crashed launcher left before
        starting any process is not a group: it is dropped (the token is free again).
        """
        record = self._store.group_of_token(client_token)
        if record is None:
            return None
        record = self._refreshed(record)  # adopts processes a crashed launcher started
        if record["state"] != SPAWNING:
            return handle_of(record)
        with _token_lock(self._token_lock_path(client_token), blocking=False) as held:
            if held is None:
                return handle_of(record)  # a launcher is starting it right now
            # Nobody launches with this token now; its launcher may have finished since the read.
            record = self._store.group_of_token(client_token)
            if record is None:
                return None
            record = self._refreshed(record)
            if record["state"] != SPAWNING:
                return handle_of(record)
            self._drop_orphan(record)
            return None

    def launch(self, request: LaunchRequest) -> GroupHandle:
        """Record the group, then start its processes; idempotent on the client token.

        One launcher per client token at a time (a lock file per token, `launches/`). The group
        is recorded (state ``spawning``) before any process starts, and the token's lock is held
        by the new processes until they have written their process group id, so a launcher that
        dies in between leaves either processes its group adopts (`find`, `poll`, `terminate` and
        a relaunch see them) or provably none (a relaunch starts them afresh).
        """
        j = self._validate_request(request)
        cold_start_hours = _cold_start_hours(request.env)
        with _token_lock(self._token_lock_path(request.client_token)) as token_lock:
            existing = self._store.group_of_token(request.client_token)
            if existing is not None:
                record = self._refreshed(same_request(existing, request))  # adopts what a crashed launcher started
                if record["state"] != SPAWNING:
                    return handle_of(record)
                self._drop_orphan(record)  # we hold the token: nobody is starting it, nothing runs
            with self._zone_lock(request) if request.spot else contextlib.nullcontext():
                now_hours = self._require_trace(self.clock.now_hours())
                group_id = uuid.uuid4().hex[:12]
                record = new_record(
                    request, group_id, self.state_dir / "groups" / group_id, now_hours, cold_start_hours
                )
                if request.spot:
                    holdings = self._holdings(j)
                    self._require_capacity(request, j, now_hours, holdings)
                    self._groups.claim(record, [h.key for h in holdings])
                self.checkpoint_dir(request.job_id, request.zone).mkdir(parents=True, exist_ok=True)
                self._store.insert(record)
            if record["state"] != SPAWNING:
                return handle_of(record)  # no workload: nothing to start
            # Recorded (committed) before any process starts.
            try:
                pgid = self._spawn(record, request, token_lock.fileno())
            except BaseException as exc:
                self._spawn_failed(group_id, exc)
                raise
            return self._record_spawned(group_id, pgid)

    def _require_capacity(self, request: LaunchRequest, j: int, now_hours: float, holdings: list[Holding]) -> None:
        """Refuse a spot launch the zone has no room for beside the groups holding capacity there now."""
        available = self.market.available(j, self._groups.grid_hours(now_hours))
        room = left(available, holdings)
        if room < request.count:
            held = sum(h.count for h in holdings)
            raise CapacityError(
                f"no spot capacity for {request.count}× {request.instance_type} in {request.zone} at "
                f"{self.clock.timestamp_at(now_hours).isoformat()}: the trace shows {available} available, "
                f"other groups hold {held}, {room} left"
            )

    def _holdings(self, j: int) -> list[Holding]:
        """The spot groups of market `j` holding capacity now (each settled as of now, as a poll would)."""
        market = self.market.grid.markets[j]
        now_wall = time.time()
        holdings = []
        for record in self._store.records():
            same = record["zone"] == market.zone and record["instance_type"] == market.instance_type
            if not (same and record["spot"] and record["state"] in NOT_ENDED):
                continue
            record = self._refreshed(record, now_wall)
            if record["state"] in NOT_ENDED:
                holdings.append(Holding(record["group_id"], record["launched_at_hours"], record["count"]))
        return holdings

    def _zone_lock(self, request: LaunchRequest):
        """One spot launch at a time per zone and instance type, across processes: the capacity check
        and the new group's record must not interleave with another launch's."""
        key = hashlib.sha256(f"{request.zone}\0{request.instance_type}".encode()).hexdigest()[:40]
        return exclusive(self.state_dir / "capacity" / f"{key}.lock")

    def _spawn(self, record: dict, request: LaunchRequest, hold_fd: int) -> int:
        """Start the group's supervisor (which holds `hold_fd` until it has written its pgid)."""
        group_dir = Path(record["group_dir"])
        launched_at = record["launched_at_hours"]
        loss = self._groups.capacity_loss_hours(record) if request.spot else None
        home = group_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        store = self.checkpoint_dir(request.job_id, request.zone)
        run_id = run_id_of(request.client_token)
        return spawn_group(
            group_dir,
            _agent_command(store, group_dir / WORK_DIR, run_id, request.command),
            cwd=group_dir,
            env={
                **self._workload_env(request, record["group_id"], home),
                NOTICE_SECONDS_ENV: repr(self._groups.notice_wall_seconds),
            },
            run_record=store / "runs" / f"{run_id}.json",
            start_at_wall=self.clock.wall_at_hours(launched_at + record["cold_start_hours"]),
            notice_wall_seconds=self._groups.notice_wall_seconds,
            preempt_at_wall=None if loss is None else self.clock.wall_at_hours(loss),
            hold_fd=hold_fd,
        )

    def _record_spawned(self, group_id: str, pgid: int) -> GroupHandle:
        """The group's processes run: record them (a group terminated meanwhile is killed now)."""
        with self._store.changing(group_id) as record:
            self._groups.adopt(record, pgid)
            self._groups.refresh(record, time.time())
            return handle_of(record)

    def _spawn_failed(self, group_id: str, exc: BaseException) -> None:
        """Starting the processes raised: adopt them if they started anyway, else the group failed."""
        with self._store.changing(group_id) as record:
            now_wall = time.time()
            self._groups.refresh(record, now_wall)
            if record["state"] == SPAWNING and not group_alive(Path(record["group_dir"])):
                reason = f"the group's processes did not start: {type(exc).__name__}: {exc}"
                end(record, GroupStatus.FAILED, self.clock.hours_at_wall(now_wall), reason)

    def _token_lock_path(self, client_token: str) -> Path:
        return self.state_dir / "launches" / f"{hashlib.sha256(client_token.encode()).hexdigest()[:40]}.lock"

    def poll(self, handle: GroupHandle) -> GroupStatus:
        now_wall = time.time()
        record = self._refreshed(self._record(handle), now_wall)
        return self._groups.status(record, self.clock.hours_at_wall(now_wall))

    def terminate(self, handle: GroupHandle) -> None:
        """Stop the group now: its processes are SIGKILLed at once, billing stops (idempotent)."""
        with self._store.changing(self._record(handle)["group_id"]) as record:
            if record is None:
                raise ValueError(f"unknown group {handle.to_dict()}: it was not launched through {self.state_dir}")
            self._groups.terminate(record, time.time())

    def progress(self, handle: GroupHandle) -> float | None:
        """step / total_steps from `progress.json` in the group's job's checkpoint in its zone.

        The workload's agent writes it after each checkpoint it completes; None when absent or
        unreadable. Dated by its `updated_at` (the agent's wall clock, this host's) on the simulated clock.
        """
        record = self._record(handle)
        job_id, zone = record.get("job_id", ""), record["zone"]
        if not job_id:
            return None  # a group recorded before checkpoints belonged to jobs
        try:
            data = json.loads((self.checkpoint_dir(job_id, zone) / "progress.json").read_text())
            step, total = float(data["step"]), float(data["total_steps"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return self.checkpointed(min(max(step / total, 0.0), 1.0), data.get("updated_at")) if total > 0 else None

    def hours_at_wall(self, wall: float) -> float | None:
        return self.clock.hours_at_wall(wall)

    def probe(
        self,
        region: str,
        zone: str,
        instance_type: str,
        count: int,
        *,
        tags: dict[str, str] | None = None,
        kind: str = PROBE_LAUNCH,
    ) -> ProbeResult:
        """A launch probe bills what it was granted for `PROBE_HOURS`; a request probe bills only
        what `request_race_billed` lets through before the cancel (docs/probing.md)."""
        check_probe_kind(self.name, kind, self.probe_kinds)
        j = self.market.index(zone, instance_type)
        _check_region(self.market.grid.markets[j].region, region, zone)
        if count < 1:
            raise ValueError(f"probe count must be ≥ 1, got {count}")
        now_hours = self._require_trace(self.now_hours())
        grid_hours = self._groups.grid_hours(now_hours)
        granted = min(left(self.market.available(j, grid_hours), self._holdings(j)), count)
        billed = granted if kind == PROBE_LAUNCH else request_race_billed(zone, grid_hours, granted)
        usd = billed * self.market.cost_usd(j, True, grid_hours, grid_hours + PROBE_HOURS)
        self._store.add_line(
            "probes",
            {
                "zone": zone,
                "region": region,
                "instance_type": instance_type,
                "requested": count,
                "available": granted,
                "at_hours": grid_hours - self._groups.grid_offset_hours,
                "usd": usd,
                "kind": kind,
                "tags": {**(tags or {}), "skynomad:purpose": "probe"},
            },
        )
        return ProbeResult(
            zone=zone,
            instance_type=instance_type,
            requested=count,
            available=granted,
            spot_usd_per_hour=self.market.spot_usd_per_hour(j, grid_hours),
            on_demand_usd_per_hour=self.market.on_demand_usd_per_hour(j, grid_hours),
            usd=usd,
            kind=kind,
            billed=billed,
        )

    def copy_checkpoint(
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Replace the job's checkpoint in the target zone with its checkpoint in the source zone.

        Returns True, and bills `size_gb` × egress, only when the job had a checkpoint there and
        it was copied; another job's checkpoints are never read or touched. `tags` are kept on
        the transfer's bill entry (as a cost-allocation tag would be).
        """
        self.market.zone(source_zone), self.market.zone(target_zone)  # validate both names
        _check_job_id(job_id)
        if not size_gb >= 0:
            raise ValueError(f"size_gb must be ≥ 0, got {size_gb!r}")
        if source_zone == target_zone:
            return False  # already there: nothing moves, nothing is paid
        with self._job_files(job_id):
            source = self.checkpoint_dir(job_id, source_zone)
            if not (source.is_dir() and any(source.iterdir())):
                return False
            _replace_dir(source, self.checkpoint_dir(job_id, target_zone))
            usd_per_gb = float(self._egress_usd_per_gb(source_zone, target_zone))
            self._store.add_line(
                "egress",
                {
                    "job_id": job_id,
                    "source_zone": source_zone,
                    "target_zone": target_zone,
                    "size_gb": size_gb,
                    "copied": True,
                    "usd_per_gb": usd_per_gb,
                    "usd": size_gb * usd_per_gb,
                    "at_hours": self.now_hours(),
                    "tags": dict(tags or {}),
                },
            )
            return True

    def output_location(self, job_id: str, zone: str) -> str | None:
        """`<store>/output`, where the agent uploaded the workload's final files, once it has (else None)."""
        self.market.zone(zone)
        _check_job_id(job_id)
        path = self.checkpoint_dir(job_id, zone) / "output"
        return str(path) if (path / "MANIFEST.json").is_file() else None

    def failure_detail(self, handle: GroupHandle) -> str | None:
        """The workload's stderr tail as the agent recorded it (runs/<token>.json) if its group failed;
        else the end of groups/<id>/workload.log (the agent could not record it: it never ran, or died)."""
        now_wall = time.time()
        record = self._refreshed(self._record(handle), now_wall)
        failed = self._groups.status(record, self.clock.hours_at_wall(now_wall)) is GroupStatus.FAILED
        group_dir = Path(record["group_dir"])
        if not failed:
            return None
        runs = self.checkpoint_dir(record["job_id"], record["zone"]) / "runs"
        run = runs / f"{run_id_of(record['client_token'])}.json"
        with contextlib.suppress(OSError, ValueError, TypeError):
            tail = json.loads(run.read_text()).get("stderr_tail") or []
            if tail:
                return "\n".join(str(line) for line in tail[-FAILURE_DETAIL_LINES:])
        lines = log_tail(group_dir, FAILURE_DETAIL_LINES)
        return "\n".join(lines) if lines else None

    # -- leftovers (`skynomad cleanup`) -------------------------------------------------------

    def resources(self, tags: dict[str, str] | None = None) -> list[Resource]:
        """Live groups (kind ``instance``, id = group id) and every job's checkpoint store per zone
        (kind ``checkpoint``, id = ``<job_id>/<zone>``, tagged like the job's latest group).

        A state directory serves one deployment: whatever it holds carries this cloud's deployment id."""
        from airflow_provider_skynomad.clouds.tags import DEPLOYMENT

        wanted = (tags or {}).items()
        found: list[Resource] = []
        job_tags: dict[str, dict[str, str]] = {}
        now_wall = time.time()
        for record in self._store.records():
            record = self._refreshed(record, now_wall)
            own = {k: v for k, v in record["tags"].items() if k != CLIENT_TOKEN_TAG}
            own.setdefault(DEPLOYMENT, self.deployment_id)
            job_tags[record.get("job_id", "")] = {"skynomad-job": record.get("job_id", ""), **own}
            if record["state"] in NOT_ENDED and wanted <= record["tags"].items():
                status = self._groups.status(record, self.clock.hours_at_wall(now_wall)).value
                found.append(
                    Resource(
                        cloud=record["cloud"],
                        kind="instance",
                        id=record["group_id"],
                        region=record["region"],
                        zone=record["zone"],
                        job_id=record.get("job_id", ""),
                        tags={DEPLOYMENT: self.deployment_id, **record["tags"]},
                        detail=f"{record['count']}× {record['instance_type']} "
                        f"{'spot' if record['spot'] else 'on-demand'}, {status}",
                    )
                )
        jobs = self.state_dir / "jobs"
        for store in sorted(jobs.glob("*/*/checkpoint")) if jobs.is_dir() else ():
            job_id, zone = store.parent.parent.name, store.parent.name
            if not (_JOB_ID.fullmatch(job_id) and zone in {m.zone for m in self.market.grid.markets}):
                continue
            tagged = job_tags.get(job_id, {"skynomad-job": job_id, DEPLOYMENT: self.deployment_id})
            if wanted <= tagged.items():
                market = self.market.zone(zone)
                found.append(
                    Resource(
                        cloud=market.cloud,
                        kind="checkpoint",
                        id=f"{job_id}/{zone}",
                        region=market.region,
                        zone=zone,
                        job_id=job_id,
                        tags=dict(tagged),
                        detail=f"checkpoint store {store.as_uri()}",
                    )
                )
        return found

    def release(self, resource: Resource) -> None:
        """Terminate a group / delete a job's checkpoint store in a zone; releasing twice is harmless."""
        if resource.kind == "instance":
            with self._store.changing(resource.id) as record:
                if record is not None:
                    self._groups.terminate(record, time.time())
            return
        if resource.kind == "checkpoint":
            job_id, _, zone = resource.id.partition("/")
            self.market.zone(zone)  # a zone of this trace: the id names no other directory
            store = self.checkpoint_dir(job_id, zone)
            with self._job_files(job_id):  # not while a copy_checkpoint writes it
                if store.exists():
                    retired = store.parent / f".{store.name}.{uuid.uuid4().hex[:8]}.released"
                    os.rename(store, retired)
                    shutil.rmtree(retired, ignore_errors=True)
                with contextlib.suppress(OSError):
                    store.parent.rmdir()  # the zone's directory, if nothing else is in it
            return
        raise ValueError(f"the simulated cloud has no {resource.kind!r} resources (only instance and checkpoint)")

    # -- bill and inspection ----------------------------------------------------------------

    def bill(self, tags: dict[str, str] | None = None) -> dict:
        """Costs so far: live groups are billed up to now. Hours are simulated group-hours.

        With `tags`, only the groups, probes and checkpoint copies whose tags include them (e.g. one
        job's ``{"skynomad-job": id}``), as a cloud's cost report filtered by cost-allocation tags.
        """
        wanted = (tags or {}).items()
        now_wall = time.time()
        records = [self._refreshed(r, now_wall) for r in self._store.records() if wanted <= r["tags"].items()]
        now_hours = self.clock.hours_at_wall(now_wall)
        groups = [self._groups.describe(r, now_hours) for r in records]
        probes, egress = (
            [e for e in self._store.lines(kind) if wanted <= e.get("tags", {}).items()] for kind in ("probes", "egress")
        )

        def total(key: str, spot: bool) -> float:
            return sum(g[key] for g in groups if g["spot"] is spot)

        bill = {
            "spot_usd": total("usd", True),
            "on_demand_usd": total("usd", False),
            "egress_usd": sum(e["usd"] for e in egress),
            "probe_usd": sum(p["usd"] for p in probes),
            "spot_hours": total("hours", True),
            "on_demand_hours": total("hours", False),
            "spot_instance_hours": total("instance_hours", True),
            "on_demand_instance_hours": total("instance_hours", False),
            "probes": len(probes),
            "as_of_hours": now_hours,
            "groups": groups,
            "egress": egress,
        }
        bill["total_usd"] = bill["spot_usd"] + bill["on_demand_usd"] + bill["egress_usd"] + bill["probe_usd"]
        return bill

    def describe(self, handle: GroupHandle) -> dict:
        """Everything recorded about one group (status, times, tags, cost so far, process group id)."""
        now_wall = time.time()
        record = self._refreshed(self._record(handle), now_wall)
        return self._groups.describe(record, self.clock.hours_at_wall(now_wall))

    def groups(self, tags: dict[str, str] | None = None) -> list[dict]:
        """Describe every group whose tags include `tags` (like a cloud's list-instances tag filter)."""
        return self.bill(tags)["groups"]

    def launches(self, job_id: str | None = None) -> list[dict]:
        """Every group ever launched (of `job_id`, if given), oldest first: the cloud's launch record.

        Invariant checks read it: e.g. "never two groups of one job alive at once" compares the
        `start_hours`/`end_hours` intervals of one job's launches. Ended groups stay in it (only a
        record a crashed launcher left before starting any process is dropped: nothing ran).
        Each launch is plain data: ``group_id``, ``job_id``, ``client_token``, ``zone``,
        ``instance_type``, ``spot``, ``gang_size``, ``status``, ``start_hours``, ``end_hours``
        (None while the group is alive), ``end_reason`` and ``cost_usd`` (so far), in simulated
        hours on this cloud's clock.
        """
        now_wall = time.time()
        now_hours = self.clock.hours_at_wall(now_wall)
        described = (
            self._groups.describe(self._refreshed(r, now_wall), now_hours) for r in self._store.records(job_id)
        )
        return [
            {
                "group_id": g["group_id"],
                "job_id": g.get("job_id", ""),
                "client_token": g["client_token"],
                "zone": g["zone"],
                "instance_type": g["instance_type"],
                "spot": g["spot"],
                "gang_size": g["count"],
                "status": g["status"],
                "start_hours": g["launched_at_hours"],
                "end_hours": g["ended_at_hours"],
                "end_reason": g["end_reason"],
                "cost_usd": g["usd"],
            }
            for g in described
        ]

    def job_dir(self, job_id: str, zone: str) -> Path:
        """`job_id`'s directory in `zone` (its checkpoint store is `checkpoint_dir`)."""
        return self.state_dir / "jobs" / _check_job_id(job_id) / zone

    def unusable_zones(self, zones: list[str]) -> dict[str, str]:
        """Zones its trace does not have: it can launch nowhere else."""
        known = {market.zone for market in self.market.grid.markets}
        return {zone: "not a zone of the simulated cloud's trace" for zone in zones if zone not in known}

    def checkpoint_dir(self, job_id: str, zone: str) -> Path:
        """`job_id`'s checkpoint store in `zone`: the agent's `file://` prefix (docs/agent.md)."""
        return self.job_dir(job_id, zone) / "checkpoint"

    def checkpoint_store(self, job_id: str, zone: str):
        """The job's store in `zone` as the agent sees it (a `file://` CheckpointStore), for copies across clouds."""
        from airflow_provider_skynomad.agent.store import CheckpointStore

        self.market.zone(zone)
        return CheckpointStore(self.checkpoint_dir(job_id, zone).as_uri())

    def work_dir(self, handle: GroupHandle) -> Path:
        """The group's local disk: the workload's cwd; `work_dir/checkpoint` is its SKYNOMAD_CHECKPOINT_DIR."""
        return Path(self._record(handle)["group_dir"]) / WORK_DIR

    def default_egress_usd_per_gb(self, source_zone: str, target_zone: str) -> float:
        """The public list prices the planner plans with (market.egress), so bill and plan agree."""
        return EgressModel().usd_per_gb(self.market.zone(source_zone), self.market.zone(target_zone))

    # -- internals --------------------------------------------------------------------------

    def _resolve_start(self, trace_start) -> pd.Timestamp:
        first = self.market.grid.start
        if trace_start is None:
            return first
        if isinstance(trace_start, (int, float)):
            start = first + pd.Timedelta(hours=float(trace_start))
        else:
            start = pd.Timestamp(trace_start)
            start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
        if not 0 <= self.market.hours_of(start) < self.market.end_hours:
            end = first + pd.Timedelta(hours=self.market.end_hours)
            raise ValueError(
                f"trace_start {start.isoformat()} is outside the trace ({first.isoformat()} → {end.isoformat()})"
            )
        return start

    def _require_trace(self, now_hours: float) -> float:
        """Refuse to invent a market past the trace's end (groups already running keep its last row)."""
        if self._groups.grid_hours(now_hours) >= self.market.end_hours:
            end = self.market.grid.start + pd.Timedelta(hours=self.market.end_hours)
            raise TraceEndedError(
                f"the simulated clock ({self.clock.timestamp_at(now_hours).isoformat()}, hour {now_hours:.1f} of "
                f"{self.state_dir}) is past the end of {self.trace_path.name} ({end.isoformat()}): the clock started "
                "when this state_dir was first opened; use a fresh state_dir for a new run"
            )
        return now_hours

    def _validate_request(self, request: LaunchRequest) -> int:
        j = self.market.index(request.zone, request.instance_type)
        market = self.market.grid.markets[j]
        if request.cloud not in (market.cloud, self.name):
            raise ValueError(
                f"zone {request.zone} is in cloud {market.cloud!r} in the trace, request says {request.cloud!r}"
            )
        _check_region(market.region, request.region, request.zone)
        if not isinstance(request.count, int) or request.count < 1:
            raise ValueError(f"count must be an integer ≥ 1, got {request.count!r}")
        if not request.client_token:
            raise ValueError("client_token is empty; it is what makes a retried launch return the same group")
        if not request.job_id:
            raise ValueError(
                "job_id is empty; the simulated cloud keeps checkpoints per job (jobs/<job_id>/<zone>/checkpoint), "
                "so every launch must say whose checkpoints its workload restores from and writes to"
            )
        _check_job_id(request.job_id)
        return j

    def _refreshed(self, record: dict, now_wall: float | None = None) -> dict:
        """The record settled as of `now_wall` (adopted processes, preemption, exit, kills).

        Settling is tried on the copy first: a group whose fate has not changed since it was
        stored (most polls) is written by nobody. Otherwise it is settled again on the locked
        row and stored; what settling does to processes (SIGKILL of what must not run) is
        idempotent, so doing it on both is harmless.
        """
        now_wall = time.time() if now_wall is None else now_wall
        if _settled(record):
            return record
        before = json.dumps(record, sort_keys=True)
        trial = json.loads(before)
        self._groups.refresh(trial, now_wall)
        if json.dumps(trial, sort_keys=True) == before:
            return trial
        with self._store.changing(record["group_id"]) as locked:
            if locked is None:
                return trial  # dropped meanwhile (an orphan record): what it was is all there is
            self._groups.refresh(locked, now_wall)
            return locked

    def _drop_orphan(self, record: dict) -> None:
        """Forget a group recorded by a launcher that died before starting any process of it."""
        self._store.delete(record["group_id"])
        shutil.rmtree(record["group_dir"], ignore_errors=True)

    def _job_files(self, job_id: str):
        """One job's checkpoint stores change one at a time (a copy, a release): its lock file."""
        return exclusive(self.state_dir / "jobs" / _check_job_id(job_id) / ".lock")

    def _workload_env(self, request: LaunchRequest, group_id: str, home: Path) -> dict[str, str]:
        """The instance's environment: the few host variables of `HOST_ENV_KEPT`, the group's own
        HOME, the request's env, and what the simulated cloud provides (``SKYNOMAD_*``, last: they win)."""
        kept = {k: v for k, v in os.environ.items() if k in HOST_ENV_KEPT or k.startswith(HOST_ENV_KEPT_PREFIXES)}
        return {
            **kept,
            "HOME": str(home),
            **request.env,
            "SKYNOMAD_JOB_ID": request.job_id,
            "SKYNOMAD_SIM_SPEED": repr(self.speed),
            "SKYNOMAD_ZONE": request.zone,
            "SKYNOMAD_GROUP_ID": group_id,
            "SKYNOMAD_INSTANCE_COUNT": str(request.count),
        }

    def _record(self, handle: GroupHandle) -> dict:
        """The stored record of the group `handle` names (as read now: see `_refreshed`)."""
        record = self._store.group_of_token(handle.client_token)
        if (
            record is None
            or record["zone"] != handle.zone
            or (handle.job_id and record.get("job_id", "") != handle.job_id)
        ):
            raise ValueError(f"unknown group {handle.to_dict()}: it was not launched through {self.state_dir}")
        return record


def run_id_of(client_token: str) -> str:
    """The agent's --run-id for a group: its client token if that is a safe file name, else a digest of it."""
    if _JOB_ID.fullmatch(client_token):
        return client_token
    return "token-" + hashlib.sha256(client_token.encode()).hexdigest()[:32]


def _agent_command(store: Path, work_dir: Path, run_id: str, command: tuple[str, ...]) -> list[str]:
    """The workload agent around the workload, as an instance's boot script starts it (docs/agent.md)."""
    agent = [sys.executable, "-m", "airflow_provider_skynomad.agent", "run", "--store", store.as_uri()]
    return [*agent, "--work-dir", str(work_dir), "--run-id", run_id, "--notice", "simulated", "--", *command]


def _cold_start_hours(env: dict[str, str]) -> float:
    text = env.get(COLD_START_ENV)
    if text is None:
        return DEFAULT_COLD_START_HOURS
    try:
        hours = float(text)
    except ValueError:
        hours = float("nan")
    if not (math.isfinite(hours) and hours >= 0):
        raise ValueError(f"env {COLD_START_ENV} must be a number of hours ≥ 0, got {text!r}")
    return hours


@contextlib.contextmanager
def _token_lock(path: Path, blocking: bool = True):
    """An exclusive flock on `path`: yields the open file, or None when not blocking and it is held.

    It is released by closing, never by LOCK_UN: a supervisor that inherited the descriptor keeps
    it locked until it has written its pgid, even after the launcher has gone.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield None
            return
        yield lock


def _settled(record: dict) -> bool:
    """Nothing can change this record any more: ended, and its processes (if any) are known dead."""
    if record["state"] in NOT_ENDED:
        return False
    return record["killed"] or not record.get("command")


def _check_job_id(job_id: str) -> str:
    """A job id names a directory: one path component of letters, digits, '.', '_' and '-'."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise ValueError(
            f"job_id {job_id!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return job_id


def _check_region(expected: str, given: str, zone: str) -> None:
    if given != expected:
        raise ValueError(f"zone {zone} is in region {expected} in the trace, request says {given!r}")


def _replace_dir(source: Path, target: Path) -> None:
    """Copy `source` over `target` so the target is never half-written (temp copy, then renames)."""
    suffix = uuid.uuid4().hex[:8]
    staging = target.parent / f".{target.name}.{suffix}.tmp"
    target.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        try:
            shutil.copytree(source, staging, ignore=shutil.ignore_patterns(".*.tmp"))
            break
        except shutil.Error:
            # An agent still running in the source zone (a preempted group's notice) pruned an old
            # checkpoint under the copy: copy again (what it leaves is complete or has no manifest).
            shutil.rmtree(staging, ignore_errors=True)
            if attempt == 2:
                raise
    if target.exists():
        retired = target.parent / f".{target.name}.{suffix}.old"
        os.rename(target, retired)
        os.rename(staging, target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.rename(staging, target)

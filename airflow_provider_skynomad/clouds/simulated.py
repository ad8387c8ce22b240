"""SimulatedCloud: a trace replayed on an accelerated clock, the embedded default cloud.

Everything runs with no cloud account, yet the operator and trigger exercise the real code
paths: a spot launch is refused when the trace has no capacity, a running spot group is
preempted when the trace loses capacity (the workload gets SIGTERM, then SIGKILL after the
notice), the workload is a real subprocess that checkpoints into a per-zone directory, and
every group, probe and checkpoint copy is billed at the trace's prices.

All state — the clock's epoch, the groups, the bill — lives in `state_dir`, so the worker
that launches, the triggerer that polls, a retried task and a test in another process all
see one cloud. Group status is derived, not sampled: a preemption happens at the trace's
capacity-loss instant and billing stops there, however late someone polls.

Layout of `state_dir`::

    cloud.json              clock epoch, speed, trace (written once; every process reads it)
    state.json, state.lock  groups, client tokens, probes, egress (flock-guarded JSON)
    groups/<id>/            the supervisor's launch.json, exit.json, alive.lock, workload.log
    zones/<zone>/           the workload's cwd; zones/<zone>/checkpoint is SKYNOMAD_CHECKPOINT_DIR
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..market.egress import EgressModel
from .base import CapacityError, Cloud, GroupHandle, GroupStatus, LaunchRequest, ProbeResult
from .simulated_clock import SimClock, open_shared_clock, read_shared_settings
from .simulated_groups import CLIENT_TOKEN_TAG, GroupTracker, handle_of, new_record, same_request
from .simulated_launcher import spawn_group
from .simulated_market import TraceMarket
from .simulated_store import StateStore

COLD_START_ENV = "SKYNOMAD_COLD_START_HOURS"
DEFAULT_COLD_START_HOURS = 0.2
PROBE_HOURS = 1.0 / 60.0  # a probe holds what it was granted for one simulated minute
_SETTINGS = ("trace_path", "speed", "trace_start", "preemption_notice_seconds")
__all__ = ["CLIENT_TOKEN_TAG", "COLD_START_ENV", "DEFAULT_COLD_START_HOURS", "SimulatedCloud", "TraceEndedError"]


class TraceEndedError(RuntimeError):
    """The simulated clock has run past the end of the trace: there is no market left to replay."""


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
    """

    name = "simulated"

    def __init__(
        self,
        trace_path: str | Path,
        state_dir: str | Path,
        speed: float = 3600.0,
        trace_start: str | pd.Timestamp | float | None = None,
        preemption_notice_seconds: float = 30.0,
        egress_usd_per_gb: Callable[[str, str], float] | None = None,
    ):
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
        }
        config = open_shared_clock(self.state_dir, wanted)
        self.speed = config["speed"]
        self.preemption_notice_seconds = config["preemption_notice_seconds"]
        self.clock = SimClock(config["epoch_wall"], self.speed, pd.Timestamp(config["trace_start"]))
        self._groups = GroupTracker(self.market, self.clock, self.preemption_notice_seconds)
        self._egress_usd_per_gb = egress_usd_per_gb or self.default_egress_usd_per_gb
        self._store = StateStore(self.state_dir)

    @classmethod
    def attach(
        cls, state_dir: str | Path, egress_usd_per_gb: Callable[[str, str], float] | None = None
    ) -> SimulatedCloud:
        """Open an existing state directory with the settings it was created with."""
        settings = read_shared_settings(Path(state_dir).expanduser())
        return cls(state_dir=state_dir, egress_usd_per_gb=egress_usd_per_gb, **{k: settings[k] for k in _SETTINGS})

    def to_config(self) -> dict:
        """Plain-data constructor arguments (e.g. for trigger kwargs); the egress function is not included."""
        return {
            "trace_path": str(self.trace_path),
            "state_dir": str(self.state_dir),
            "speed": self.speed,
            "trace_start": self.clock.start.isoformat(),
            "preemption_notice_seconds": self.preemption_notice_seconds,
        }

    # -- clock ------------------------------------------------------------------------------

    def now_hours(self) -> float:
        """Simulated hours since the clock's epoch (the trace instant `trace_start`)."""
        return self.clock.now_hours()

    def now_timestamp(self) -> pd.Timestamp:
        """The simulated instant as a UTC trace timestamp."""
        return self.clock.now()

    def sleep_until_simulated(self, hours: float) -> None:
        """Block until `now_hours()` ≥ `hours`."""
        self.clock.sleep_until(hours)

    # -- Cloud interface --------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> GroupHandle:
        j = self._validate_request(request)
        cold_start_hours = _cold_start_hours(request.env)
        with self._store.update() as state:
            existing = state["tokens"].get(request.client_token)
            if existing is not None:
                return handle_of(same_request(state["groups"][existing], request))
            now_wall = time.time()
            now_hours = self.clock.hours_at_wall(now_wall)
            self._require_trace(now_hours)
            if request.spot:
                available = self.market.available(j, self._groups.grid_hours(now_hours))
                if available < request.count:
                    raise CapacityError(
                        f"no spot capacity for {request.count}× {request.instance_type} in {request.zone} at "
                        f"{self.clock.timestamp_at(now_hours).isoformat()} (the trace shows {available} available)"
                    )
            group_id = uuid.uuid4().hex[:12]
            record = new_record(request, group_id, self.state_dir / "groups" / group_id, now_hours, cold_start_hours)
            self.checkpoint_dir(request.zone).mkdir(parents=True, exist_ok=True)
            if request.command:
                loss = (
                    self._groups.capacity_loss_hours(request.zone, request.instance_type, request.count, now_hours)
                    if request.spot
                    else None
                )
                record["pgid"] = spawn_group(
                    Path(record["group_dir"]),
                    list(request.command),
                    cwd=self.zone_dir(request.zone),
                    env=self._workload_env(request, group_id),
                    start_at_wall=self.clock.wall_at_hours(now_hours + cold_start_hours),
                    notice_wall_seconds=self._groups.notice_wall_seconds,
                    preempt_at_wall=None if loss is None else self.clock.wall_at_hours(loss),
                )
            state["groups"][group_id] = record
            state["tokens"][request.client_token] = group_id
            return handle_of(record)

    def poll(self, handle: GroupHandle) -> GroupStatus:
        with self._store.update() as state:
            record = self._record(state, handle)
            now_wall = time.time()
            self._groups.refresh(record, now_wall)
            return self._groups.status(record, self.clock.hours_at_wall(now_wall))

    def terminate(self, handle: GroupHandle) -> None:
        """Stop the group now: its processes are SIGKILLed at once, billing stops (idempotent)."""
        with self._store.update() as state:
            self._groups.terminate(self._record(state, handle), time.time())

    def progress(self, handle: GroupHandle) -> float | None:
        """step / total_steps from the zone's `progress.json`, None when absent or unreadable."""
        try:
            data = json.loads((self.checkpoint_dir(handle.zone) / "progress.json").read_text())
            step, total = float(data["step"]), float(data["total_steps"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return min(max(step / total, 0.0), 1.0) if total > 0 else None

    def probe(
        self, region: str, zone: str, instance_type: str, count: int, *, tags: dict[str, str] | None = None
    ) -> ProbeResult:
        j = self.market.index(zone, instance_type)
        _check_region(self.market.grid.markets[j].region, region, zone)
        if count < 1:
            raise ValueError(f"probe count must be ≥ 1, got {count}")
        with self._store.update() as state:
            grid_hours = self._groups.grid_hours(self._require_trace(self.now_hours()))
            granted = min(self.market.available(j, grid_hours), count)
            usd = granted * self.market.cost_usd(j, True, grid_hours, grid_hours + PROBE_HOURS)
            state["probes"].append(
                {
                    "zone": zone,
                    "region": region,
                    "instance_type": instance_type,
                    "requested": count,
                    "available": granted,
                    "at_hours": grid_hours - self._groups.grid_offset_hours,
                    "usd": usd,
                    "tags": {**(tags or {}), "skynomad:purpose": "probe"},
                }
            )
            return ProbeResult(
                zone=zone,
                instance_type=instance_type,
                requested=count,
                available=granted,
                spot_usd_per_hour=self.market.spot_usd_per_hour(j, grid_hours),
                on_demand_usd_per_hour=self.market.on_demand_usd_per_hour(j, grid_hours),
            )

    def copy_checkpoint(
        self, source_zone: str, target_zone: str, size_gb: float, *, tags: dict[str, str] | None = None
    ) -> None:
        """Replace the target zone's checkpoint with the source's; bill `size_gb` × egress if anything moved.

        `tags` are kept on the transfer's bill entry (as a cost-allocation tag would be).
        """
        self.market.zone(source_zone), self.market.zone(target_zone)  # validate both names
        if not size_gb >= 0:
            raise ValueError(f"size_gb must be ≥ 0, got {size_gb!r}")
        if source_zone == target_zone:
            return
        with self._store.update() as state:
            source = self.checkpoint_dir(source_zone)
            copied = source.is_dir() and any(source.iterdir())
            if copied:
                _replace_dir(source, self.checkpoint_dir(target_zone))
            usd_per_gb = float(self._egress_usd_per_gb(source_zone, target_zone))
            state["egress"].append(
                {
                    "source_zone": source_zone,
                    "target_zone": target_zone,
                    "size_gb": size_gb,
                    "copied": copied,
                    "usd_per_gb": usd_per_gb,
                    "usd": size_gb * usd_per_gb if copied else 0.0,
                    "at_hours": self.now_hours(),
                    "tags": dict(tags or {}),
                }
            )

    # -- bill and inspection ----------------------------------------------------------------

    def bill(self, tags: dict[str, str] | None = None) -> dict:
        """Costs so far: live groups are billed up to now. Hours are simulated group-hours.

        With `tags`, only the groups, probes and checkpoint copies whose tags include them (e.g. one
        job's ``{"skynomad-job": id}``), as a cloud's cost report filtered by cost-allocation tags.
        """
        wanted = (tags or {}).items()
        with self._store.update() as state:
            now_wall = time.time()
            for record in state["groups"].values():
                self._groups.refresh(record, now_wall)
            now_hours = self.clock.hours_at_wall(now_wall)
            groups = sorted(
                (self._groups.describe(r, now_hours) for r in state["groups"].values()),
                key=lambda g: g["launched_at_hours"],
            )
            groups = [g for g in groups if wanted <= g["tags"].items()]
            probes, egress = (
                [e for e in state[kind] if wanted <= e.get("tags", {}).items()] for kind in ("probes", "egress")
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
        with self._store.update() as state:
            record = self._record(state, handle)
            now_wall = time.time()
            self._groups.refresh(record, now_wall)
            return self._groups.describe(record, self.clock.hours_at_wall(now_wall))

    def groups(self, tags: dict[str, str] | None = None) -> list[dict]:
        """Describe every group whose tags include `tags` (like a cloud's list-instances tag filter)."""
        return self.bill(tags)["groups"]

    def zone_dir(self, zone: str) -> Path:
        return self.state_dir / "zones" / zone

    def checkpoint_dir(self, zone: str) -> Path:
        return self.zone_dir(zone) / "checkpoint"

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
        return j

    def _workload_env(self, request: LaunchRequest, group_id: str) -> dict[str, str]:
        """The instance's environment: this host's, the request's, and what the simulated cloud provides."""
        return {
            **os.environ,
            **request.env,
            "SKYNOMAD_CHECKPOINT_DIR": str(self.checkpoint_dir(request.zone)),
            "SKYNOMAD_SIM_SPEED": repr(self.speed),
            "SKYNOMAD_ZONE": request.zone,
            "SKYNOMAD_GROUP_ID": group_id,
            "SKYNOMAD_INSTANCE_COUNT": str(request.count),
        }

    def _record(self, state: dict, handle: GroupHandle) -> dict:
        group_id = state["tokens"].get(handle.client_token)
        if group_id is None or state["groups"][group_id]["zone"] != handle.zone:
            raise ValueError(f"unknown group {handle.to_dict()}: it was not launched through {self.state_dir}")
        return state["groups"][group_id]


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


def _check_region(expected: str, given: str, zone: str) -> None:
    if given != expected:
        raise ValueError(f"zone {zone} is in region {expected} in the trace, request says {given!r}")


def _replace_dir(source: Path, target: Path) -> None:
    """Copy `source` over `target` so the target is never half-written (temp copy, then renames)."""
    suffix = uuid.uuid4().hex[:8]
    staging = target.parent / f".{target.name}.{suffix}.tmp"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, staging, ignore=shutil.ignore_patterns(".*.tmp"))
    if target.exists():
        retired = target.parent / f".{target.name}.{suffix}.old"
        os.rename(target, retired)
        os.rename(staging, target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.rename(staging, target)

"""A simulated group's fate and price, derived from the trace and its workload — never sampled.

A spot group is preempted at the first trace instant after its launch at which its zone has
fewer instances than the gang needs beside what the groups launched before it still hold there
(`capacity.py`: the youngest groups are taken back first), however late anyone polls;
alone in its zone, that is the trace's first shortfall. It succeeded or failed when
its workload exited, whichever of the two came first. Billing runs from launch to that end
at the zone's price, following price changes. Deriving rather than sampling is what makes
the bill and the status independent of who polled when, and from which process.

Group records are plain JSON dicts (they live in the shared state file). Times in records
are simulated hours on the cloud's clock; the market is asked in grid hours.

A group with a workload is recorded *before* its processes start (state ``spawning``) and
adopts its process group id from the supervisor's ``pgid.json`` as soon as that exists, so a
crash between starting the processes and recording them never leaves a group nobody tracks.
"""

from __future__ import annotations

import signal
from pathlib import Path

from airflow_provider_skynomad.clouds.base import GroupHandle, GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.simulated.capacity import Loss, has_claim, loss, mark_ended, write_claim
from airflow_provider_skynomad.clouds.simulated.clock import SECONDS_PER_HOUR, SimClock
from airflow_provider_skynomad.clouds.simulated.launcher import group_alive, read_exit, read_pgid, signal_group
from airflow_provider_skynomad.clouds.simulated.market import TraceMarket

LIVE = "live"  # stored state of a group that has not ended; STARTING vs RUNNING is derived from the clock
SPAWNING = "spawning"  # recorded, its processes being started (or their launcher crashed): STARTING
NOT_ENDED = (LIVE, SPAWNING)
CLIENT_TOKEN_TAG = "skynomad:client-token"


def new_record(
    request: LaunchRequest, group_id: str, group_dir: Path, now_hours: float, cold_start_hours: float
) -> dict:
    """The stored record of a group launched now; tagged like a real cloud tags its instances.

    A group with a command starts as ``spawning``: it is recorded before its processes exist.
    """
    return {
        "group_id": group_id,
        "client_token": request.client_token,
        "job_id": request.job_id,
        "cloud": request.cloud,
        "region": request.region,
        "zone": request.zone,
        "instance_type": request.instance_type,
        "count": request.count,
        "spot": request.spot,
        "instance_ids": [f"sim-{group_id}-{i}" for i in range(request.count)],
        "tags": {**request.tags, CLIENT_TOKEN_TAG: request.client_token},
        "command": list(request.command),
        "launched_at_hours": now_hours,
        "cold_start_hours": cold_start_hours,
        "group_dir": str(group_dir),
        "pgid": None,  # process group of the supervisor and workload; None when there is no command (yet)
        "state": SPAWNING if request.command else LIVE,
        "ended_at_hours": None,
        "end_reason": None,
        "exit_code": None,
        "kill_after_wall": None,  # preempted: SIGKILL by then if the supervisor has not
        "killed": False,
    }


class GroupTracker:
    """Settles, prices and describes group records for one cloud (trace + clock)."""

    def __init__(self, market: TraceMarket, clock: SimClock, preemption_notice_seconds: float):
        self.market = market
        self.clock = clock
        self.notice_wall_seconds = clock.wall_seconds(preemption_notice_seconds / SECONDS_PER_HOUR)
        self.grid_offset_hours = market.hours_of(clock.start)

    def grid_hours(self, hours: float) -> float:
        return hours + self.grid_offset_hours

    def refresh(self, record: dict, now_wall: float) -> None:
        """Adopt a started group's processes; settle a live group's fate; SIGKILL what must not run.

        Killed here: a preempted group whose notice is over, and a group that ended (terminated,
        or failed to start) before its processes were known to this record.
        """
        self.adopt(record)
        if record["state"] in NOT_ENDED:
            self._settle(record, now_wall)
        overdue = record["kill_after_wall"] is not None and now_wall >= record["kill_after_wall"]
        ended_unkilled = record["state"] not in (*NOT_ENDED, GroupStatus.PREEMPTED.value)
        if record["pgid"] is not None and not record["killed"] and (overdue or ended_unkilled):
            signal_group(record["pgid"], Path(record["group_dir"]), signal.SIGKILL)
            record["killed"] = True

    def adopt(self, record: dict, pgid: int | None = None) -> None:
        """Take the group's process group id (given, or from its supervisor's `pgid.json`) once it exists."""
        if record["pgid"] is not None or not record.get("command"):
            return
        pgid = pgid if pgid is not None else read_pgid(Path(record["group_dir"]))
        if pgid is None:
            return
        record["pgid"] = pgid
        if record["state"] == SPAWNING:
            record["state"] = LIVE
        elif record["state"] == GroupStatus.PREEMPTED.value and record["kill_after_wall"] is None:
            record["kill_after_wall"] = self.clock.wall_at_hours(record["ended_at_hours"]) + self.notice_wall_seconds

    def terminate(self, record: dict, now_wall: float) -> None:
        """End a live group now and kill its processes at once (idempotent)."""
        self.refresh(record, now_wall)  # a group already preempted or finished keeps its real end
        if record["state"] in NOT_ENDED:
            end(record, GroupStatus.TERMINATED, self.clock.hours_at_wall(now_wall), "terminated on request")
        if record["pgid"] is not None and not record["killed"]:
            signal_group(record["pgid"], Path(record["group_dir"]), signal.SIGKILL)
            record["killed"] = True

    def status(self, record: dict, now_hours: float) -> GroupStatus:
        if record["state"] == SPAWNING:
            return GroupStatus.STARTING
        if record["state"] != LIVE:
            return GroupStatus(record["state"])
        starting = now_hours < record["launched_at_hours"] + record["cold_start_hours"]
        return GroupStatus.STARTING if starting else GroupStatus.RUNNING

    def describe(self, record: dict, now_hours: float) -> dict:
        """The record plus status, ISO times, hours and cost so far (a live group is billed up to now)."""
        j = self.market.index(record["zone"], record["instance_type"])
        start = record["launched_at_hours"]
        ended = record["ended_at_hours"]
        stop = ended if ended is not None else max(now_hours, start)
        per_instance_usd = self.market.cost_usd(j, record["spot"], self.grid_hours(start), self.grid_hours(stop))
        return {
            **{k: v for k, v in record.items() if k != "kill_after_wall"},
            "status": self.status(record, now_hours).value,
            "launched_at": self.clock.timestamp_at(start).isoformat(),
            "ended_at": self.clock.timestamp_at(ended).isoformat() if ended is not None else None,
            "hours": stop - start,
            "instance_hours": (stop - start) * record["count"],
            "usd": per_instance_usd * record["count"],
        }

    def _settle(self, record: dict, now_wall: float) -> None:
        now_hours = self.clock.hours_at_wall(now_wall)
        group_dir = Path(record["group_dir"])
        exit_info = read_exit(group_dir) if record["pgid"] is not None else None
        if exit_info is None and record["pgid"] is not None and not group_alive(group_dir):
            # Re-read: the supervisor writes exit.json before the group dies.
            exit_info = read_exit(group_dir) or {"returncode": None, "ended_at_wall": now_wall}
        exit_hours = self.clock.hours_at_wall(exit_info["ended_at_wall"]) if exit_info else None
        lost = self._capacity_loss(record, now_hours)
        if lost is not None and (exit_hours is None or lost.hours <= exit_hours):
            at = self.clock.timestamp_at(lost.hours).isoformat()
            reason = f"trace shows {lost.available} available < {record['count']} at {at}"
            if lost.held:
                reason = (
                    f"trace shows {lost.available} available at {at}, of which groups launched earlier hold "
                    f"{lost.held}: {max(lost.available - lost.held, 0)} left < {record['count']}"
                )
            end(record, GroupStatus.PREEMPTED, lost.hours, reason)
            if record["pgid"] is not None:
                # The supervisor gave the notice at the loss itself; SIGKILL here only if it could not.
                record["kill_after_wall"] = self.clock.wall_at_hours(lost.hours) + self.notice_wall_seconds
            return
        if exit_info is not None:
            code = exit_info["returncode"]
            status = GroupStatus.SUCCEEDED if code == 0 else GroupStatus.FAILED
            reason = "workload vanished without an exit status" if code is None else f"workload exited {code}"
            if exit_info.get("agent_exit_code") == 2 and "outcome" not in exit_info:
                reason = f"the workload agent could not start it (exit 2, see {group_dir / 'workload.log'})"
            end(record, status, min(max(exit_hours, record["launched_at_hours"]), now_hours), reason)
            record["exit_code"], record["killed"] = code, True

    def claim(self, record: dict, older: list[str]) -> None:
        """Write a new spot group's claim on its zone's capacity (`capacity.py`).

        :param older: the ids of the spot groups of its zone and instance type alive at its launch.
        """
        j = self.market.index(record["zone"], record["instance_type"])
        launched = record["launched_at_hours"]
        available = self.market.grid.available[:, j]
        first = self.market.tick(self.grid_hours(launched))
        steps = [(launched, int(available[first]))]
        for k in range(first + 1, len(available)):
            if available[k] != available[k - 1]:
                steps.append((k * self.market.step_hours - self.grid_offset_hours, int(available[k])))
        write_claim(
            Path(record["group_dir"]),
            count=record["count"],
            launched_at_hours=launched,
            steps=steps,
            older=older,
            epoch_wall=self.clock.epoch_wall,
            speed=self.clock.speed,
        )

    def capacity_loss_hours(self, record: dict) -> float | None:
        """When the trace takes a spot group's capacity away, as known now (None: never, in this trace).

        It can only move later: a group launched before it may end first.
        """
        lost = self._capacity_loss(record, float("inf"))
        return None if lost is None else lost.hours

    def _capacity_loss(self, record: dict, now_hours: float) -> Loss | None:
        """When the trace took the spot group's capacity away, if that has happened by now."""
        if not record["spot"]:
            return None
        group_dir = Path(record["group_dir"])
        if has_claim(group_dir):
            lost = loss(group_dir)
        else:  # a group recorded before groups shared capacity: alone in its zone
            j = self.market.index(record["zone"], record["instance_type"])
            launched = self.grid_hours(record["launched_at_hours"])
            grid_hours = self.market.first_shortfall_hours(j, record["count"], launched)
            lost = None
            if grid_hours is not None:
                hours = grid_hours - self.grid_offset_hours
                lost = Loss(hours, self.market.available(j, grid_hours), 0)
        return lost if lost is not None and lost.hours <= now_hours else None


def end(record: dict, status: GroupStatus, at_hours: float, reason: str) -> None:
    """End the group in its record; a spot group's capacity is free from then (`mark_ended`)."""
    record.update(state=status.value, ended_at_hours=at_hours, end_reason=reason)
    if record["spot"]:
        mark_ended(Path(record["group_dir"]), at_hours, capacity_loss=status is GroupStatus.PREEMPTED)


def handle_of(record: dict) -> GroupHandle:
    return GroupHandle(
        cloud=record["cloud"],
        zone=record["zone"],
        instance_ids=tuple(record["instance_ids"]),
        spot=record["spot"],
        client_token=record["client_token"],
        job_id=record.get("job_id", ""),
        region=record["region"],
    )


def same_request(record: dict, request: LaunchRequest) -> dict:
    """The group a reused client token names, if the request matches it (as EC2 checks idempotent calls)."""
    fields = ("zone", "instance_type", "count", "spot", "job_id")
    differ = [f for f in fields if record.get(f, "") != getattr(request, f)]
    if differ:
        raise ValueError(
            f"client token {request.client_token!r} was used for group {record['group_id']} with other "
            f"{', '.join(differ)}; use a new token for a different launch"
        )
    return record

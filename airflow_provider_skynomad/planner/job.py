"""Job specification and job state: the planner's inputs besides the market."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from airflow_provider_skynomad.exceptions import JobSpecError
from airflow_provider_skynomad.planner.actions import Option


@dataclass(frozen=True)
class JobSpec:
    """A gang job: `work_hours` of progress on `instances` identical machines before `deadline_hours`.

    :param work_hours: P, progress needed (hours on the gang, cold starts excluded).
    :param deadline_hours: T, hours from the job's start by which the work must be done.
    :param cold_start_hours: d, paid on every launch (provision + restore), billed, no progress.
    :param checkpoint_gb: S, size moved on a migration between zones.
    :param instances: N, gang size; a market is usable when `available ≥ N`.
    :param probe_hours: billed spot time of one probe (launch + terminate at once).
    :param bandwidth_gb_per_hour: when set, a migration also adds S / bandwidth hours to the cold start.
    :param reaction_hours: how late a change is carried out (the driver's control-loop lag: Airflow
        resuming the worker after a trigger event). The safety net lets a change start that late and a
        rescue come two lags late, so a slow scheduler cannot turn "just in time" into "late". The
        operator learns it; the simulator replays it (`skynomad evaluate --reaction-minutes`).
    :param checkpoint_interval_hours: the job writes a checkpoint every this many hours of progress;
        0 (the default) means progress is saved as it is made, so no preemption loses work.
    :param final_checkpoint_on_notice: the preemption notice leaves time for one last checkpoint (a
        small checkpoint, a long notice). When False and the interval is > 0, a preempted group loses
        the progress made since its last periodic checkpoint. A stop the job chooses always saves first.
    """

    work_hours: float
    deadline_hours: float
    cold_start_hours: float = 0.2
    checkpoint_gb: float = 50.0
    instances: int = 1
    probe_hours: float = 1.0 / 60.0
    bandwidth_gb_per_hour: float | None = None
    reaction_hours: float = 0.0
    checkpoint_interval_hours: float = 0.0
    final_checkpoint_on_notice: bool = False

    def __post_init__(self) -> None:
        checks = [
            (self.work_hours > 0, f"work_hours must be > 0, got {self.work_hours}"),
            (self.deadline_hours > 0, f"deadline_hours must be > 0, got {self.deadline_hours}"),
            (self.cold_start_hours >= 0, f"cold_start_hours must be ≥ 0, got {self.cold_start_hours}"),
            (self.checkpoint_gb >= 0, f"checkpoint_gb must be ≥ 0, got {self.checkpoint_gb}"),
            (self.instances >= 1, f"instances must be ≥ 1, got {self.instances}"),
            (self.probe_hours >= 0, f"probe_hours must be ≥ 0, got {self.probe_hours}"),
            (self.reaction_hours >= 0, f"reaction_hours must be ≥ 0, got {self.reaction_hours}"),
            (
                self.checkpoint_interval_hours >= 0,
                f"checkpoint_interval_hours must be ≥ 0, got {self.checkpoint_interval_hours}",
            ),
            (
                self.bandwidth_gb_per_hour is None or self.bandwidth_gb_per_hour > 0,
                f"bandwidth_gb_per_hour must be > 0 when set, got {self.bandwidth_gb_per_hour}",
            ),
        ]
        numbers = (
            "work_hours",
            "deadline_hours",
            "cold_start_hours",
            "checkpoint_gb",
            "probe_hours",
            "reaction_hours",
            "checkpoint_interval_hours",
        )
        for name in numbers + (("bandwidth_gb_per_hour",) if self.bandwidth_gb_per_hour is not None else ()):
            if not math.isfinite(getattr(self, name)):  # nan fails the checks below anyway; inf would not
                raise JobSpecError(f"{name} must be a finite number, got {getattr(self, name)}")
        for ok, message in checks:
            if not ok:
                raise JobSpecError(message)

    @property
    def feasible(self) -> bool:
        """One on-demand run from the start meets the deadline."""
        return self.deadline_hours >= self.work_hours + self.cold_start_hours

    def require_feasible(self) -> None:
        if not self.feasible:
            raise JobSpecError(
                f"deadline {self.deadline_hours:g} h is shorter than work {self.work_hours:g} h + one cold start "
                f"{self.cold_start_hours:g} h: no plan can meet it; extend the deadline or reduce the work"
            )

    @property
    def loses_work(self) -> bool:
        """A preemption loses the progress since the last periodic checkpoint (no final one on notice)."""
        return self.checkpoint_interval_hours > 0 and not self.final_checkpoint_on_notice

    def unsaved_after(self, unsaved_hours: float, progress_hours: float) -> float:
        """Progress not yet checkpointed after `progress_hours` more on a group that had `unsaved_hours`."""
        if not self.loses_work:
            return 0.0
        return math.fmod(unsaved_hours + progress_hours, self.checkpoint_interval_hours)

    def transfer_hours(self, moved: bool) -> float:
        """Extra start-up time of a launch that first copies the checkpoint from another zone."""
        if not moved or not self.bandwidth_gb_per_hour:
            return 0.0
        return self.checkpoint_gb / self.bandwidth_gb_per_hour

    def launch_hours(self, moved: bool) -> float:
        """Warm-up of a new group before it makes progress: the cold start, plus the transfer if the checkpoint moves.

        The planner, the simulator and the operator all charge a launch this, so they agree on it.
        """
        return self.cold_start_hours + self.transfer_hours(moved)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class JobState:
    """Where the job stands at one decision point.

    :param elapsed_hours: t, hours since the job started.
    :param progress_hours: p, work done and checkpointed.
    :param running: the option currently holding instances, or None when idle.
    :param running_since_hours: when the current group launched (its age is t minus this).
    :param warmup_left_hours: cold start (and checkpoint transfer) the current group still has to pay.
    :param checkpoint_market: where the latest checkpoint lives (None until the job has made progress:
        a group lost in its first cold start leaves nothing to move).
    :param last_preempted_market: the most recent market that preempted us (failover skips it first).
    :param unsaved_hours: the part of p the running group made since its last periodic checkpoint
        (`JobSpec.checkpoint_interval_hours`): lost if it is preempted without a final checkpoint.
    """

    elapsed_hours: float = 0.0
    progress_hours: float = 0.0
    running: Option | None = None
    running_since_hours: float = 0.0
    warmup_left_hours: float = 0.0
    checkpoint_market: str | None = None
    last_preempted_market: str | None = None
    unsaved_hours: float = 0.0

    def moves_checkpoint(self, market: str) -> bool:
        """A launch in `market` must first copy the checkpoint there (there is one and it lives elsewhere)."""
        return self.checkpoint_market is not None and self.checkpoint_market != market

    def age_hours(self) -> float:
        return self.elapsed_hours - self.running_since_hours if self.running else 0.0

    def advance(self, **changes) -> JobState:
        return replace(self, **changes)

    def launched(self, option: Option, at_hours: float, warmup_hours: float) -> JobState:
        """A new group runs `option`: an existing checkpoint moves with it (its egress is paid at launch)."""
        checkpoint = option.market if self.checkpoint_market is not None else None
        return replace(
            self,
            running=option,
            running_since_hours=at_hours,
            warmup_left_hours=warmup_hours,
            checkpoint_market=checkpoint,
            unsaved_hours=0.0,  # the group it replaces (if any) saved before it stopped
        )

    def lost(self) -> JobState:
        """The running group was preempted without a final checkpoint: p goes back to the last checkpoint.

        Back at 0 there is no checkpoint at all, so the next launch moves nothing.
        """
        progress = max(0.0, self.progress_hours - self.unsaved_hours)
        checkpoint = self.checkpoint_market if progress > 0 else None
        return replace(self, progress_hours=progress, unsaved_hours=0.0, checkpoint_market=checkpoint)

    def progressed(self, progress_hours: float, **changes) -> JobState:
        """Progress is now `progress_hours`; the first progress writes the first checkpoint where the group runs."""
        checkpoint = self.checkpoint_market
        if checkpoint is None and progress_hours > 0 and self.running is not None:
            checkpoint = self.running.market
        return replace(self, progress_hours=progress_hours, checkpoint_market=checkpoint, **changes)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["running"] = self.running.to_dict() if self.running else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> JobState:
        data = dict(data)
        data["running"] = Option.from_dict(data["running"]) if data.get("running") else None
        return cls(**data)

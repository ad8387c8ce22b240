"""SkyNomadTrigger: watch one running (or idle) job and wake the worker when it must act.

The trigger only waits and reads: every decision step (simulated minutes on the simulated cloud)
it polls the group and the workload's progress, asks the planner what it would run now, and
yields exactly one event when the worker has something to do:

- ``finished``: the workload exited successfully;
- ``preempted``: the group was lost (spot preemption, or terminated behind our back);
- ``failed``: the workload or the group failed for another reason;
- ``replan``: the planner wants something other than what runs (launch, move, release);
- ``deadline_pressure``: as ``replan``, but staying put could no longer meet the deadline
  (the worker must move to the safety net now).

Every blocking call (cloud API, market table, planner) runs in ``asyncio.to_thread`` so one
triggerer carries many jobs. Constructor arguments are plain JSON data mirrored exactly by
``serialize()``; events carry ``seq`` (the deferral they answer) so the worker can drop repeats.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..clouds.base import GroupHandle, GroupStatus
from ..hooks import skynomad as _hooks
from ..hooks.skynomad import SkyNomadHook
from ..planner.actions import Decision, Option
from ..planner.job import JobSpec, JobState

if TYPE_CHECKING:
    import pandas as pd

# The triggerer imports this module on its event loop: keep it light. pandas, numpy and the
# planner are imported inside the worker threads that use them.

EVENT_KINDS = ("finished", "preempted", "failed", "replan", "deadline_pressure")
KEY = ["zone", "instance_type", "observed_at"]


class SkyNomadTrigger(BaseTrigger):
    """Poll the cloud and ask the planner every decision step; yield when the worker must act.

    :param job: JobSpec as a dict (hours are cloud hours).
    :param job_start_hours: the cloud clock (``cloud.now_hours()``) when the job started.
    :param state: JobState dict at deferral time (progress, where the checkpoint is, ...).
    :param group: GroupHandle dict of the running group, or None when idle.
    :param launch_delay_hours: cold start (+ transfer) the running group pays after launch.
    :param zones: market zones the job may use.
    :param instance_types: instance types the job may use (None = any in the market table).
    :param policy: planner policy name (``planner.registry``).
    :param policy_params: keyword arguments for the policy.
    :param decision_step_hours: how often to ask the planner, in cloud hours.
    :param seq: which deferral this trigger answers; echoed in every event.
    :param skynomad_conn_id: the `skynomad` connection (market table + cloud); resolved in the triggerer.
    :param market_lookback_hours: how much market history the planner sees.
    :param max_wall_seconds_per_step: cap on one sleep (keeps real-cloud jobs responsive in tests).
    """

    def __init__(
        self,
        *,
        job: dict,
        job_start_hours: float,
        state: dict,
        group: dict | None,
        launch_delay_hours: float,
        zones: list[str],
        instance_types: list[str] | None,
        policy: str,
        policy_params: dict | None,
        decision_step_hours: float,
        seq: int,
        skynomad_conn_id: str,
        market_lookback_hours: float = 72.0,
        max_wall_seconds_per_step: float | None = None,
    ) -> None:
        super().__init__()
        self.job = job
        self.job_start_hours = job_start_hours
        self.state = state
        self.group = group
        self.launch_delay_hours = launch_delay_hours
        self.zones = list(zones)
        self.instance_types = list(instance_types) if instance_types else None
        self.policy = policy
        self.policy_params = dict(policy_params or {})
        self.decision_step_hours = decision_step_hours
        self.seq = seq
        self.skynomad_conn_id = skynomad_conn_id
        self.market_lookback_hours = market_lookback_hours
        self.max_wall_seconds_per_step = max_wall_seconds_per_step
        self._frame: pd.DataFrame | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job": self.job,
                "job_start_hours": self.job_start_hours,
                "state": self.state,
                "group": self.group,
                "launch_delay_hours": self.launch_delay_hours,
                "zones": self.zones,
                "instance_types": self.instance_types,
                "policy": self.policy,
                "policy_params": self.policy_params,
                "decision_step_hours": self.decision_step_hours,
                "seq": self.seq,
                "skynomad_conn_id": self.skynomad_conn_id,
                "market_lookback_hours": self.market_lookback_hours,
                "max_wall_seconds_per_step": self.max_wall_seconds_per_step,
            },
        )

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = SkyNomadHook(self.skynomad_conn_id)
        try:
            config = await hook.aget_config()
            # Trace loading, database connection and the planner's imports all block: not on the loop.
            cloud, table, policy = await asyncio.to_thread(self._setup, config)
        except Exception as exc:  # noqa: BLE001 - the worker turns this into a clear task failure
            yield self._event("failed", reason=f"trigger could not start: {type(exc).__name__}: {exc}")
            return
        job = JobSpec(**self.job)
        base = JobState.from_dict(self.state)
        handle = GroupHandle.from_dict(self.group) if self.group else None
        step_wall = config.wall_seconds_per_cloud_hour * self.decision_step_hours
        if self.max_wall_seconds_per_step is not None:
            step_wall = min(step_wall, self.max_wall_seconds_per_step)
        try:
            while True:
                await asyncio.sleep(step_wall)
                started = time.monotonic()
                elapsed = await asyncio.to_thread(cloud.now_hours) - self.job_start_hours
                status = await asyncio.to_thread(cloud.poll, handle) if handle else None
                if status is GroupStatus.SUCCEEDED:
                    yield self._event("finished", elapsed=elapsed, progress=job.work_hours, status=status)
                    return
                if status in (GroupStatus.PREEMPTED, GroupStatus.TERMINATED):
                    progress = await self._progress(cloud, handle, job, base, elapsed)
                    yield self._event("preempted", elapsed=elapsed, progress=progress, status=status)
                    return
                if status is GroupStatus.FAILED:
                    progress = await self._progress(cloud, handle, job, base, elapsed)
                    yield self._event(
                        "failed", elapsed=elapsed, progress=progress, status=status, reason="group failed"
                    )
                    return
                progress = await self._progress(cloud, handle, job, base, elapsed)
                if handle is not None and progress >= job.work_hours - 1e-9:
                    continue  # all work checkpointed: the workload is writing its result and exiting
                state = self._state_now(base, elapsed, progress)
                decision, kind = await asyncio.to_thread(self._decide, table, cloud, policy, job, state)
                if kind is not None:
                    yield self._event(
                        kind,
                        elapsed=elapsed,
                        progress=progress,
                        status=status,
                        decision=decision,
                        reason=decision.reason,
                        decide_seconds=time.monotonic() - started,
                    )
                    return
                self.log.debug(
                    "skynomad t=%.2fh p=%.2f/%.2fh staying on %s (%s)",
                    elapsed,
                    progress,
                    job.work_hours,
                    state.running,
                    decision.reason,
                )
        finally:
            await asyncio.to_thread(table.close)

    # -- pieces (also used by tests and the benchmark) -----------------------------------------

    def _setup(self, config):
        from ..planner.registry import get_policy

        cloud = _hooks.make_cloud(config)
        table = _open_table(config.market_url)
        return cloud, table, get_policy(self.policy, **self.policy_params)

    async def on_kill(self) -> None:
        """The user killed the deferred task: terminate the group this job runs on."""
        if not self.group:
            return
        config = await SkyNomadHook(self.skynomad_conn_id).aget_config()
        cloud = await asyncio.to_thread(_hooks.make_cloud, config)
        await asyncio.to_thread(cloud.terminate, GroupHandle.from_dict(self.group))

    def _state_now(self, base: JobState, elapsed: float, progress: float) -> JobState:
        age = elapsed - base.running_since_hours if base.running else 0.0
        warmup_left = max(0.0, self.launch_delay_hours - age) if base.running else 0.0
        return base.progressed(progress, elapsed_hours=elapsed, warmup_left_hours=warmup_left)

    async def _progress(self, cloud, handle, job: JobSpec, base: JobState, elapsed: float) -> float:
        """Checkpointed work in hours: the workload's own report, else an estimate from run time."""
        fraction = await asyncio.to_thread(cloud.progress, handle) if handle else None
        if fraction is not None:
            return max(base.progress_hours, min(1.0, float(fraction)) * job.work_hours)
        if base.running is None:
            return base.progress_hours
        ran = elapsed - base.running_since_hours - self.launch_delay_hours
        return min(job.work_hours, base.progress_hours + max(0.0, ran))

    def _decide(self, table, cloud, policy, job: JobSpec, state: JobState) -> tuple[Decision, str | None]:
        """Ask the planner; the event kind when the worker must act, else None (in a thread)."""
        from ..planner.safety import is_safe

        view = self._view(table, cloud, job)
        decision = policy.decide(job, state, view, state.elapsed_hours)
        if not decision.wants_change(state.running):
            return decision, None
        return decision, ("replan" if is_safe(job, state, view, state.running) else "deadline_pressure")

    def _view(self, table, cloud, job: JobSpec):
        import pandas as pd

        from ..clouds.driver import cloud_now
        from ..hooks.skynomad import market_view

        until = cloud_now(cloud) + pd.Timedelta(seconds=1)
        self._frame = refresh_frame(
            table, self._frame, self.zones, self.instance_types, until, self.market_lookback_hours
        )
        return market_view(self._frame, self.decision_step_hours, job.instances)

    def _event(
        self,
        kind: str,
        *,
        elapsed: float | None = None,
        progress: float | None = None,
        status: GroupStatus | None = None,
        decision: Decision | None = None,
        reason: str = "",
        decide_seconds: float | None = None,
    ) -> TriggerEvent:
        assert kind in EVENT_KINDS, kind
        return TriggerEvent(
            {
                "kind": kind,
                "seq": self.seq,
                "elapsed_hours": elapsed,
                "progress_hours": progress,
                "status": status.value if status else None,
                "decision": decision.to_dict() if decision else None,
                "reason": reason,
                "decide_seconds": decide_seconds,
            }
        )


def _open_table(url: str):
    from ..market.table import MarketTable

    table = MarketTable(url)
    table.create()
    return table


def refresh_frame(
    table,
    frame: pd.DataFrame | None,
    zones: list[str],
    instance_types: list[str] | None,
    until: pd.Timestamp,
    lookback_hours: float,
) -> pd.DataFrame:
    """Market rows in [until - lookback, until), read incrementally: only rows newer than the cache."""
    import pandas as pd

    since = until - pd.Timedelta(hours=lookback_hours)
    if frame is not None and not frame.empty:
        newest = frame["observed_at"].max()
        new = table.read(zones=zones, since=newest, until=until, instance_types=instance_types)
        frame = pd.concat([frame, new], ignore_index=True) if not new.empty else frame
        frame = frame.drop_duplicates(KEY, keep="first")
        # Trim old history, but keep each market's latest row: last observation holds (docs/market.md).
        latest = frame.groupby(["zone", "instance_type"])["observed_at"].transform("max")
        frame = frame[(frame["observed_at"] >= since) | (frame["observed_at"] == latest)]
        return frame.sort_values(["observed_at", "zone", "instance_type"]).reset_index(drop=True)
    return table.read(zones=zones, since=since, until=until, instance_types=instance_types)


def option_of(data: dict | None) -> Option | None:
    return Option.from_dict(data) if data else None

"""Carry out one planner decision for a SkyNomad job and fold what happened into its `JobRecord`.

`carry_out` builds the job's launch requests and lets `clouds.driver.drive` probe, launch, move
the checkpoint and terminate; every request is written to the record (with its client token)
*before* it is sent. `recover_pending` re-sends a request a crashed worker left in flight — the
cloud answers the same token with the same group — and `apply_result` records segments, notes,
estimated costs and the planner state either way. `observe(record, view, zone, available)` shares
each launch outcome as a market observation.
"""

from __future__ import annotations

from collections.abc import Callable

from ..clouds.base import CapacityError, Cloud, GroupHandle, LaunchRequest
from ..clouds.driver import DriveResult, drive
from ..market.grid import Market
from ..market.view import MarketView
from ..planner.actions import Decision, Mode, Option
from ..planner.job import JobSpec, JobState
from ..workload import default_workload
from .record import JobRecord, Segment, StateStore

Observe = Callable[[JobRecord, MarketView, str, int], None]


def carry_out(
    record: JobRecord,
    cloud: Cloud,
    view: MarketView,
    decision: Decision,
    elapsed: float,
    store: StateStore,
    *,
    command: list[str] | None,
    env: dict[str, str],
    tags: dict[str, str],
    observe: Observe,
) -> None:
    """Carry out `decision` at `elapsed` cloud hours; `command` None runs the bundled workload."""
    job = JobSpec(**record.job)
    markets = {m.key: m for m in view.markets}
    current = GroupHandle.from_dict(record.group) if record.group else None
    current_option = option_of(record.state.get("running")) if current else None
    checkpoint_market = record.state.get("checkpoint_market")
    checkpoint_zone = markets[checkpoint_market].zone if checkpoint_market in markets else None
    meta: dict = {}

    def make_request(option: Option, market: Market) -> LaunchRequest:
        token = f"{record.job_id}-{record.launches + 1}"
        meta.clear()
        meta.update(option=option.to_dict(), elapsed=elapsed)
        return LaunchRequest(
            cloud=market.cloud,
            region=market.region,
            zone=market.zone,
            instance_type=market.instance_type,
            count=job.instances,
            spot=option.mode is Mode.SPOT,
            client_token=token,
            command=tuple(command or default_workload(job.work_hours)),
            env={
                **{str(k): str(v) for k, v in env.items()},
                # The simulated cloud charges this cold start; real clouds simply pass it on.
                "SKYNOMAD_COLD_START_HOURS": repr(job.cold_start_hours),
            },
            tags=dict(tags),
        )

    def before_launch(request: LaunchRequest) -> None:
        # Persist first: a crash after this line is repaired by re-sending the same request.
        record.launches += 1
        record.pending = request.to_dict()
        record.pending_meta = dict(meta)
        store.save(record)

    def after_failure(request: LaunchRequest) -> None:
        record.failed_launches += 1
        record.pending = None
        record.pending_meta = None
        record.note(elapsed, "no capacity", zone=request.zone, mode="spot" if request.spot else "on-demand")
        observe(record, view, request.zone, 0)
        store.save(record)

    result = drive(
        cloud,
        decision,
        current=current,
        current_option=current_option,
        checkpoint_zone=checkpoint_zone,
        markets=markets,
        make_request=make_request,
        checkpoint_gb=job.checkpoint_gb,
        gang_size=job.instances,
        tags=tags,
        before_launch=before_launch,
        after_failure=after_failure,
    )
    apply_result(record, view, result, elapsed, observe)
    store.save(record)


def recover_pending(
    record: JobRecord, cloud: Cloud, view: MarketView, store: StateStore, *, observe: Observe, log
) -> None:
    """A launch was sent (or about to be) when the last worker died: finish it, same client token."""
    if not record.pending:
        return
    request = LaunchRequest.from_dict(record.pending)
    meta = record.pending_meta or {}
    elapsed = float(meta.get("elapsed", float(cloud.now_hours()) - record.job_start_hours))
    log.info("Recovering launch %s in %s after a crash (same client token)", request.client_token, request.zone)
    try:
        handle = cloud.launch(request)
    except CapacityError:
        record.failed_launches += 1
        record.note(elapsed, "no capacity", zone=request.zone, mode="spot" if request.spot else "on-demand")
        record.pending = None
        record.pending_meta = None
        store.save(record)
        return
    option = Option.from_dict(meta["option"])
    current = GroupHandle.from_dict(record.group) if record.group else None
    if current is not None and current.instance_ids != handle.instance_ids:
        cloud.terminate(current)
    checkpoint_market = record.state.get("checkpoint_market")
    markets = {m.key: m for m in view.markets}
    moved_from = None
    if checkpoint_market in markets and markets[checkpoint_market].zone != request.zone:
        moved_from = markets[checkpoint_market].zone
        cloud.copy_checkpoint(moved_from, request.zone, float(record.job["checkpoint_gb"]), tags=request.tags)
    result = DriveResult(
        handle,
        option,
        launched=True,
        terminated=current if current and current != handle else None,
        moved_from_zone=moved_from,
    )
    apply_result(record, view, result, elapsed, observe)
    store.save(record)


def apply_result(record: JobRecord, view: MarketView, result: DriveResult, elapsed: float, observe: Observe) -> None:
    """Fold what the driver did into the record (segments, estimated costs, state)."""
    job = JobSpec(**record.job)
    markets = {m.key: m for m in view.markets}
    for probe in result.probes:
        record.probe_usd += probe.spot_usd_per_hour * job.instances * job.probe_hours
        record.note(elapsed, "probe", zone=probe.zone, available=probe.available)
    state = JobState.from_dict(record.state)
    if not result.launched and result.handle is not None:
        record.pending = None
        record.pending_meta = None
        record.note(elapsed, "stay", zone=result.option.market if result.option else None)
        return
    if result.terminated is not None:
        ended = "migrated" if result.launched else "released"
        seg = record.close_segment(elapsed, ended)
        if seg is not None and not result.launched:
            record.note(elapsed, "release", zone=seg["zone"])
    if result.launched:
        option = result.option
        market = markets[option.market]
        moved = result.moved_from_zone is not None
        if moved:
            src = next((m for m in view.markets if m.zone == result.moved_from_zone), None)
            if src is not None:
                egress = view.egress_usd_per_gb[view.index(src.key), view.index(market.key)]
                record.egress_usd += job.checkpoint_gb * float(egress)
            record.migrations += 1
        price = (
            view.spot_usd_per_hour[view.index(market.key)]
            if option.mode is Mode.SPOT
            else view.on_demand_usd_per_hour[view.index(market.key)]
        )
        delay = job.launch_hours(moved)
        record.launch_delay_hours = delay
        record.group = result.handle.to_dict()
        record.open_segment(
            Segment(
                market=market.key,
                zone=market.zone,
                region=market.region,
                mode=option.mode.value,
                start_hours=elapsed,
                usd_per_hour=float(price) * job.instances,
                launch_delay_hours=delay,
                instance_ids=list(result.handle.instance_ids),
            )
        )
        record.note(
            elapsed,
            "migrate" if moved else "launch",
            zone=market.zone,
            mode=option.mode.value,
            usd_per_h=round(float(price) * job.instances, 3),
            **({"from": result.moved_from_zone} if moved else {}),
        )
        observe(record, view, market.zone, job.instances)
        state = state.launched(option, elapsed, delay)
    else:
        record.group = None
        record.launch_delay_hours = 0.0
        state = state.advance(running=None, warmup_left_hours=0.0)
        if result.failed or result.terminated is None:
            record.note(elapsed, "idle", reason="nothing launched" if result.failed else "planner chose idle")
    record.pending = None
    record.pending_meta = None
    record.state = state.advance(elapsed_hours=elapsed).to_dict()


def option_of(data: dict | None) -> Option | None:
    return Option.from_dict(data) if data else None

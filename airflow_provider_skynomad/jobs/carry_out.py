"""Carry out one planner decision for a job and fold what happened into its `JobRecord`.

`carry_out` builds the job's launch requests and lets `drive` probe, launch, move the checkpoint
and terminate; every request is written to the record (with its client token) *before* it is
sent. `recover_pending` finishes a request a crashed worker or controller left in flight through
the same `drive.launch_group`: the cloud answers the same token with the same group.
`apply_result` records segments, estimated costs and the planner state either way. Each launch
outcome is reported through `observe(market_key, available)`.

A launch the cloud API refused throughout (clouds/retry.py) is noted in the timeline but never
reported as a market observation: a throttled API says nothing about spot capacity. When it
leaves the job with nothing running, the job fails with `SkyNomadJobFailed` naming the API's
answer (the task's retries, if any, try again later).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_skynomad.clouds.base import CapacityError, Cloud, LaunchRequest
from airflow_provider_skynomad.clouds.retry import CloudApiError
from airflow_provider_skynomad.jobs.drive import DriveResult, drive, launch_group
from airflow_provider_skynomad.jobs.errors import SkyNomadJobFailed
from airflow_provider_skynomad.jobs.record import JobRecord, PendingLaunch, Segment, StateStore
from airflow_provider_skynomad.market.grid import Market
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd

Observe = Callable[[str, int], None]  # (market key, instances available) → shared with the market table


@dataclass(frozen=True)
class Workload:
    """What every group of the job runs, and how its instances are tagged.

    `env` carries ``SKYNOMAD_COLD_START_HOURS``, the cold start the user declared: the simulated
    cloud charges it, real clouds pass it on. It is never the warm-up the job measured (planning
    with more must not make the simulated cloud start slower).
    """

    command: tuple[str, ...]
    env: dict[str, str]
    tags: dict[str, str]


def carry_out(
    record: JobRecord,
    cloud: Cloud,
    view: MarketView,
    decision: Decision,
    elapsed: float,
    store: StateStore,
    workload: Workload,
    observe: Observe,
) -> None:
    """Carry out `decision` at `elapsed` cloud hours."""
    job = record.job
    markets = {m.key: m for m in view.markets}
    current = record.group
    current_option = record.state.running if current else None
    checkpoint = record.state.checkpoint_market
    checkpoint_zone = markets[checkpoint].zone if checkpoint in markets else None
    options: dict[str, Option] = {}

    def make_request(option: Option, market: Market) -> LaunchRequest:
        token = f"{record.job_id}-{record.launches + 1}"
        options[token] = option
        return LaunchRequest(
            cloud=market.cloud,
            region=market.region,
            zone=market.zone,
            instance_type=market.instance_type,
            count=job.instances,
            spot=option.mode is Mode.SPOT,
            client_token=token,
            command=workload.command,
            env=dict(workload.env),
            tags=dict(workload.tags),
            job_id=record.job_id,
        )

    def before_launch(request: LaunchRequest) -> None:
        # Persist first: a crash after this line is repaired by finding the same token's group.
        record.launches += 1
        record.pending = PendingLaunch(request, options[request.client_token], elapsed)
        store.save(record)

    def after_failure(request: LaunchRequest) -> None:
        record.failed_launches += 1
        record.pending = None
        option = options[request.client_token]
        record.note(elapsed, NoteKind.NO_CAPACITY, zone=request.zone, mode="spot" if request.spot else "on-demand")
        observe(option.market, 0)
        store.save(record)

    def after_api_error(request: LaunchRequest, exc: CloudApiError) -> None:
        record.failed_launches += 1
        record.pending = None  # the lookup by its token found no group: nothing is in flight
        mode = "spot" if request.spot else "on-demand"
        record.note(elapsed, NoteKind.CLOUD_API, zone=request.zone, mode=mode, error=str(exc))
        store.save(record)

    try:
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
            job_id=record.job_id,
            tags=workload.tags,
            before_launch=before_launch,
            after_failure=after_failure,
            after_api_error=after_api_error,
            on_demand_fallbacks=on_demand_by_price(view),
        )
    except CloudApiError as exc:
        store.save(record)
        raise SkyNomadJobFailed(f"SkyNomad job {record.job_id} stopped: {exc}") from exc
    apply_result(record, view, result, elapsed, observe)
    store.save(record)


def on_demand_by_price(view: MarketView) -> tuple[Option, ...]:
    """On-demand in every market of the view, cheapest first (the driver's fallbacks, see `drive`)."""
    order = sorted(range(len(view.keys)), key=lambda j: float(view.on_demand_usd_per_hour[j]))
    return tuple(Option(view.keys[j], Mode.ON_DEMAND) for j in order)


def recover_pending(
    record: JobRecord, cloud: Cloud, view: MarketView, store: StateStore, observe: Observe, log
) -> None:
    """A launch was sent (or about to be) when the last worker died: finish it with the same client token."""
    pending = record.pending
    if pending is None:
        return
    request, elapsed = pending.request, pending.elapsed_hours
    log.info("Finishing launch %s in %s that was left in flight", request.client_token, request.zone)
    markets = {m.key: m for m in view.markets}
    checkpoint = record.state.checkpoint_market
    source = markets[checkpoint].zone if checkpoint in markets else None
    current = record.group
    try:
        handle, moved_from = launch_group(
            cloud, request, old=current, source_zone=source, size_gb=record.job.checkpoint_gb, tags=request.tags
        )
    except CapacityError:
        record.failed_launches += 1
        record.note(elapsed, NoteKind.NO_CAPACITY, zone=request.zone, mode="spot" if request.spot else "on-demand")
        record.pending = None
        store.save(record)
        return
    result = DriveResult(
        handle,
        pending.option,
        launched=True,
        terminated=current if current and current != handle else None,
        moved_from_zone=moved_from,
    )
    apply_result(record, view, result, elapsed, observe)
    store.save(record)


def apply_result(record: JobRecord, view: MarketView, result: DriveResult, elapsed: float, observe: Observe) -> None:
    """Fold what the driver did into the record (segments, estimated costs, state)."""
    job = record.job
    markets = {m.key: m for m in view.markets}
    for probe in result.probes:
        record.probe_usd += probe.spot_usd_per_hour * job.instances * job.probe_hours
        record.note(elapsed, NoteKind.PROBE, zone=probe.zone, available=probe.available)
    state = record.state
    if not result.launched and result.handle is not None:
        record.pending = None
        record.note(elapsed, NoteKind.STAY, zone=result.option.market if result.option else None)
        return
    ended = None  # the index of the segment this step closes: the note saying why names it
    if result.terminated is not None:
        seg = record.close_segment(elapsed, SegmentEnd.MIGRATED if result.launched else SegmentEnd.RELEASED)
        ended = len(record.segments) - 1 if seg is not None else None
        if seg is not None and not result.launched:
            record.note(elapsed, NoteKind.RELEASE, zone=seg.zone, ends_segment=ended)
    if result.launched:
        option = result.option
        market = markets[option.market]
        moved = result.moved_from_zone is not None
        left = _left_zone(record, market.zone) if not moved else None
        if moved:
            source = next((m for m in view.markets if m.zone == result.moved_from_zone), None)
            if source is not None:
                egress = view.egress_usd_per_gb[view.index(source.key), view.index(market.key)]
                record.egress_usd += job.checkpoint_gb * float(egress)
            record.migrations += 1
        j = view.index(market.key)
        price = view.spot_usd_per_hour[j] if option.mode is Mode.SPOT else view.on_demand_usd_per_hour[j]
        delay = job.launch_hours(moved)
        record.launch_delay_hours = delay
        record.group = result.handle
        if result.handle not in record.groups_used:
            record.groups_used.append(result.handle)
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
            NoteKind.MIGRATE if moved else NoteKind.LAUNCH,
            zone=market.zone,
            mode=option.mode.value,
            usd_per_h=round(float(price) * job.instances, 3),
            **({"from": result.moved_from_zone} if moved else {}),
            **({"left": left} if left is not None else {}),
            **_ends(ended, record.on_safety_net),
        )
        observe(market.key, job.instances)
        record.progress_at_launch = state.progress_hours
        state = state.launched(option, elapsed, delay)
        if not moved and record.state.moves_checkpoint(option.market):
            # Nothing was copied (there was no checkpoint to copy): the job starts afresh there.
            state = state.advance(checkpoint_market=None, progress_hours=0.0)
    else:
        record.group = None
        record.progress_at_launch = None
        record.launch_delay_hours = 0.0
        state = state.advance(running=None, warmup_left_hours=0.0)
        if result.failed or result.terminated is None:
            record.note(elapsed, NoteKind.IDLE, reason="nothing launched" if result.failed else "planner chose idle")
    record.pending = None
    record.state = state.advance(elapsed_hours=elapsed)


def _left_zone(record: JobRecord, zone: str) -> str | None:
    """The zone the planner released the job's last group in, when this launch is in another one.

    The log and the page say the job left that zone on the planner's choice; it is not counted in
    ``migrations``, which are the moves that carried a checkpoint (each one's egress is billed).
    """
    last = record.segments[-1] if record.segments else None
    if last is not None and last.end is SegmentEnd.RELEASED and last.zone != zone:
        return last.zone
    return None


def _ends(segment: int | None, safety_net: bool) -> dict:
    """A launch's note names the segment it ended (the group it replaced) and, when the deadline
    forced the switch, that cause: the job page reads why the job moved from the note itself."""
    if segment is None:
        return {}
    return {"ends_segment": segment, **({"cause": NoteKind.DEADLINE_PRESSURE.value} if safety_net else {})}

"""Carry out one planner decision for a job and fold what happened into its `JobRecord`.

`carry_out` walks the decision's options (`drive.Walk`): each launch request is written to the
record (with its client token) and saved *before* it is sent (`drive.attempt`), so a crash is
repaired by the token. `recover_pending` finishes a request a crashed worker or controller left in
flight through the same `drive.launch_group`: the cloud answers the same token with the same group.
`apply_result` records segments, estimated costs and the planner state either way.

Both return what happened (`Carried`): the market observations the launches made (a launch that
met no capacity, one that started) for the caller to share, and why the job must stop, if it
must. Nothing here calls back into the caller.

A launch the cloud API refused throughout (clouds/retry.py) is noted in the timeline but never
reported as a market observation: a throttled API says nothing about spot capacity. When it
leaves the job with nothing running, the job must stop (`Carried.stopped`) naming the API's
answer (the task's retries, if any, try again later).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from airflow_provider_skynomad.clouds.base import CapacityError, Cloud, LaunchRequest
from airflow_provider_skynomad.clouds.retry import CloudApiError
from airflow_provider_skynomad.jobs.drive import (
    Attempt,
    DriveResult,
    Ground,
    Walk,
    attempt,
    launch_group,
    market_of,
    probe_markets,
)
from airflow_provider_skynomad.jobs.record import JobRecord, PendingLaunch, Segment
from airflow_provider_skynomad.jobs.store import RecordStore
from airflow_provider_skynomad.market.grid import Market
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobState
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd


@dataclass(frozen=True)
class Observation:
    """A launch outcome or a preemption, as a market observation: `available` instances at `at`."""

    market: str
    available: int
    at: pd.Timestamp


@dataclass
class Carried:
    """What carrying out a decision did.

    :param result: what the driver did (None when it could not finish: see `stopped`).
    :param observations: what the launches taught of the markets, for the caller to share.
    :param stopped: why the job cannot go on (the cloud API refused every launch, or a launch's
        outcome cannot be told), in the words the task fails with; None when it goes on.
    """

    result: DriveResult | None = None
    observations: list[Observation] = field(default_factory=list)
    stopped: str | None = None


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
    store: RecordStore,
    workload: Workload,
) -> Carried:
    """Carry out `decision` at `elapsed` cloud hours; what happened (the record holds it too).

    Why the record is saved before each launch and after each refusal: it is what a retry, or a
    second controller, repairs the job from.
    """
    markets = {m.key: m for m in view.markets}
    carried = Carried()
    walk = Walk(decision, _ground(record, markets, workload), fallbacks=on_demand_by_price(view))
    walk.probes = probe_markets(cloud, markets, decision.probes, record.job.instances, workload.tags)
    try:
        for option in walk:  # each request is written down and saved before it is sent
            if walk.keeps(option):
                result = walk.stay()
                break
            if option is None:
                result = walk.release(cloud)
                break
            request = _request(record, option, market_of(markets, option), workload)
            record.launches += 1
            record.pending = PendingLaunch(request, option, elapsed)
            store.save(record)  # a crash after this line is repaired by finding the same token's group
            tried = attempt(cloud, request, option, walk.ground)
            result = walk.tried(tried)
            if result is not None:
                break
            observation = _refused(record, tried, elapsed, cloud)
            carried.observations += [observation] if observation is not None else []
            store.save(record)
        else:
            result = walk.exhausted()
    except CloudApiError as exc:
        store.save(record)
        carried.stopped = f"SkyNomad job {record.job_id} stopped: {exc}"
        return carried
    carried.observations += apply_result(record, view, result, elapsed, cloud.now_timestamp)
    carried.result = result
    store.save(record)
    return carried


def _ground(record: JobRecord, markets: dict[str, Market], workload: Workload) -> Ground:
    """Where the job stands: its group, the option it runs, and the zone of its checkpoint."""
    checkpoint = record.state.checkpoint_market
    return Ground(
        current=record.group,
        current_option=record.state.running if record.group else None,
        checkpoint_zone=markets[checkpoint].zone if checkpoint in markets else None,
        checkpoint_gb=record.job.checkpoint_gb,
        job_id=record.job_id,
        tags=workload.tags,
    )


def _request(record: JobRecord, option: Option, market: Market, workload: Workload) -> LaunchRequest:
    """The launch request for `option`, with the job's next client token."""
    return LaunchRequest(
        cloud=market.cloud,
        region=market.region,
        zone=market.zone,
        instance_type=market.instance_type,
        count=record.job.instances,
        spot=option.mode is Mode.SPOT,
        client_token=f"{record.job_id}-{record.launches + 1}",
        command=workload.command,
        env=dict(workload.env),
        tags=dict(workload.tags),
        job_id=record.job_id,
    )


def _refused(record: JobRecord, tried: Attempt, elapsed: float, cloud: Cloud) -> Observation | None:
    """Note a launch that started nothing; a zone with no capacity is an observation, a refusing API is not."""
    request = tried.request
    record.failed_launches += 1
    record.pending = None  # the lookup by its token found no group: nothing is in flight
    mode = "spot" if request.spot else "on-demand"
    if tried.api_error is not None:
        record.note(elapsed, NoteKind.CLOUD_API, zone=request.zone, mode=mode, error=tried.api_error)
        return None
    record.note(elapsed, NoteKind.NO_CAPACITY, zone=request.zone, mode=mode)
    return Observation(tried.option.market, 0, cloud.now_timestamp())


def on_demand_by_price(view: MarketView) -> tuple[Option, ...]:
    """On-demand in every market of the view, cheapest first (the driver's fallbacks, see `drive`)."""
    order = sorted(range(len(view.keys)), key=lambda j: float(view.on_demand_usd_per_hour[j]))
    return tuple(Option(view.keys[j], Mode.ON_DEMAND) for j in order)


def recover_pending(record: JobRecord, cloud: Cloud, view: MarketView, store: RecordStore, log) -> Carried:
    """A launch was sent (or about to be) when the last worker died: finish it with the same client token."""
    carried = Carried()
    pending = record.pending
    if pending is None:
        return carried
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
        return carried
    result = DriveResult(
        handle,
        pending.option,
        launched=True,
        terminated=current if current and current != handle else None,
        moved_from_zone=moved_from,
    )
    carried.observations += apply_result(record, view, result, elapsed, cloud.now_timestamp)
    carried.result = result
    store.save(record)
    return carried


def apply_result(record: JobRecord, view: MarketView, result: DriveResult, elapsed: float, clock) -> list[Observation]:
    """Fold what the driver did into the record (segments, estimated costs, state); the launch it
    made as a market observation, stamped by `clock` (the cloud's `now_timestamp`).

    Why one place: the first launch, every relaunch and a launch recovered after a crash must
    leave the same record behind, which the bill, the page and the next decision read."""
    job = record.job
    for probe in result.probes:
        record.probe_usd += probe.spot_usd_per_hour * job.instances * job.probe_hours
        record.note(elapsed, NoteKind.PROBE, zone=probe.zone, available=probe.available)
    if not result.launched and result.handle is not None:
        record.pending = None
        record.note(elapsed, NoteKind.STAY, zone=result.option.market if result.option else None)
        return []
    ended = None  # the index of the segment this step closes: the note saying why names it
    if result.terminated is not None:
        seg = record.close_segment(elapsed, SegmentEnd.MIGRATED if result.launched else SegmentEnd.RELEASED)
        ended = len(record.segments) - 1 if seg is not None else None
        if seg is not None and not result.launched:
            record.note(elapsed, NoteKind.RELEASE, zone=seg.zone, ends_segment=ended)
    observations = []
    if result.launched:
        state = _launched(record, view, result, elapsed, ended)
        observations.append(Observation(result.option.market, job.instances, clock()))
    else:
        record.group = None
        record.progress_at_launch = None
        record.launch_delay_hours = 0.0
        state = record.state.advance(running=None, warmup_left_hours=0.0)
        if result.failed or result.terminated is None:
            record.note(elapsed, NoteKind.IDLE, reason="nothing launched" if result.failed else "planner chose idle")
    record.pending = None
    record.state = state.advance(elapsed_hours=elapsed)
    return observations


def _launched(record: JobRecord, view: MarketView, result: DriveResult, elapsed: float, ended: int | None) -> JobState:
    """Record a group that launched (a new segment, its price, what moved; `ended`: the segment of the
    group it replaced, named on its note); the planner's state after it."""
    job, option = record.job, result.option
    market = view.markets[view.index(option.market)]
    moved = result.moved_from_zone is not None
    left = _left_zone(record, market.zone) if not moved else None
    if moved:
        record.egress_usd += _egress_usd(view, result.moved_from_zone, market, job.checkpoint_gb)
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
    record.progress_at_launch = record.state.progress_hours
    state = record.state.launched(option, elapsed, delay)
    if not moved and record.state.moves_checkpoint(option.market):
        # Nothing was copied (there was no checkpoint to copy): the job starts afresh there.
        state = state.advance(checkpoint_market=None, progress_hours=0.0)
    return state


def _egress_usd(view: MarketView, source_zone: str, market: Market, checkpoint_gb: float) -> float:
    """What copying the checkpoint from `source_zone` to `market` cost (0 when the zone is not in the view)."""
    source = next((m for m in view.markets if m.zone == source_zone), None)
    if source is None:
        return 0.0
    return checkpoint_gb * float(view.egress_usd_per_gb[view.index(source.key), view.index(market.key)])


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

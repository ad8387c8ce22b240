"""Carry out one planner Decision against a Cloud (the planner decides, a cloud only does).

Walk `try_in_order` front to back: the option already running "launches" for free; a spot launch
that meets no capacity (`CapacityError`) teaches us the zone is full and moves on; `IDLE` releases
everything. Every launch, first or relaunch, goes through `launch_group`, in one order:

1. find the launch by its client token (a crash or a second controller may have made it);
2. an on-demand launch when the job has no running group (the safety net, a relaunch that must
   hold) copies the job's newest checkpoint to the target zone *first*: its restore can never
   see a stale one;
3. launch;
4. terminate the old group, when there is one, then copy the checkpoint it left.

Spot launches copy right after the launch returns, during the new group's cold start (the agent
restores when the cold start ends): a spot launch is refused often, and a copy made before each
try would bill the job's egress for every zone that refused it. The rule when the old group still
runs (a move): it keeps working until the new group is up (a failed move never leaves the job with
nothing), and it writes its last checkpoint as it stops, so the copy comes after its termination.
A move is a migration only when a checkpoint existed and was copied: a job that has checkpointed
nothing restarts anywhere for free.

`before_launch` runs before every launch so the caller can persist the request (and its client
token) first: a crash between persisting and launching is then repaired by finding that token's
group, or by re-sending the same request, which the cloud answers with the same group.

A launch the cloud API would not take even after its retries (`CloudApiError`: throttled or
timed out throughout, see clouds/retry.py) may still have gone through unanswered, so the
token's group is looked up first: found, it is the launch's result. Not found, the option failed
like a full zone (but teaches nothing about the market) and the next one is tried. An on-demand
launch with no capacity (planners assume on-demand always launches; clouds do run out) is
followed by on-demand in the job's other markets, cheapest first (`on_demand_fallbacks`). A move
that cannot be made (every option full or refused) leaves the job on the group it has. When nothing
launched because of the API: a job that runs keeps its group (a move that cannot be made is no
reason to stop working), a job that has none fails naming the API's answer. If even the lookup
fails, nobody can tell whether a group runs: the driver stops there and raises, leaving the
request in flight for a retry (or `on_kill`, or `skynomad cleanup`) to settle by its token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_provider_skynomad.clouds.base import CapacityError, Cloud, GroupHandle, LaunchRequest, ProbeResult
from airflow_provider_skynomad.clouds.retry import CloudApiError
from airflow_provider_skynomad.market.grid import Market
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option


@dataclass
class DriveResult:
    """What carrying out a decision did; `handle`/`option` is what runs now (None = idle)."""

    handle: GroupHandle | None
    option: Option | None
    launched: bool = False
    failed: list[Option] = field(default_factory=list)
    terminated: GroupHandle | None = None
    moved_from_zone: str | None = None  # set only when a checkpoint was copied from there
    probes: list[ProbeResult] = field(default_factory=list)
    api_errors: list[str] = field(default_factory=list)  # launches the cloud API would not take


def drive(
    cloud: Cloud,
    decision: Decision,
    *,
    current: GroupHandle | None,
    current_option: Option | None,
    checkpoint_zone: str | None,
    markets: dict[str, Market],
    make_request: Callable[[Option, Market], LaunchRequest],
    checkpoint_gb: float,
    gang_size: int,
    job_id: str,
    tags: dict[str, str] | None = None,
    before_launch: Callable[[LaunchRequest], None] = lambda request: None,
    after_failure: Callable[[LaunchRequest], None] = lambda request: None,
    after_api_error: Callable[[LaunchRequest, CloudApiError], None] = lambda request, exc: None,
    on_demand_fallbacks: tuple[Option, ...] = (),
) -> DriveResult:
    """Execute `decision`; see the module docstring for the order of effects.

    `tags` (the job's) go on its probes and checkpoint copies, so the cloud can bill them to the job.

    :raises CloudApiError: nothing launched because of the cloud API and the job has no group, or
        a launch's outcome cannot be told (the message says which, in plain words).
    """
    probes = _probes(cloud, markets, decision.probes, gang_size, tags)
    failed: list[Option] = []
    api_errors: list[str] = []
    for option in _with_fallbacks(decision.try_in_order, on_demand_fallbacks, failed):
        if option is not None and current is not None and option == current_option:
            return DriveResult(current, current_option, failed=failed, probes=probes)
        if option is None:
            if current is not None:
                cloud.terminate(current)
            return DriveResult(None, None, failed=failed, terminated=current, probes=probes)
        market = _market(markets, option)
        request = make_request(option, market)
        before_launch(request)
        try:
            handle, moved_from = launch_group(
                cloud, request, old=current, source_zone=checkpoint_zone, size_gb=checkpoint_gb, tags=tags
            )
        except CapacityError:
            failed.append(option)
            after_failure(request)
            continue
        except CloudApiError as exc:
            handle = _unanswered(cloud, request, exc)
            if handle is None:
                failed.append(option)
                api_errors.append(str(exc))
                after_api_error(request, exc)
                continue
            moved_from = _settle(cloud, handle, current, checkpoint_zone, checkpoint_gb, request.job_id or job_id, tags)
        return DriveResult(
            handle,
            option,
            launched=True,
            failed=failed,
            terminated=current,
            moved_from_zone=moved_from,
            probes=probes,
            api_errors=api_errors,
        )
    if current is not None:  # a move that cannot be made leaves the job where it runs
        return DriveResult(current, current_option, failed=failed, probes=probes, api_errors=api_errors)
    if api_errors:
        raise CloudApiError(
            f"no group could be launched: {api_errors[-1]}; nothing of this job is running"
            + (f" ({len(api_errors)} launches refused)" if len(api_errors) > 1 else "")
        )
    # Nothing launched (every spot option was full): the job waits idle for the next step.
    return DriveResult(None, None, failed=failed, probes=probes)


def _with_fallbacks(order, fallbacks: tuple[Option, ...], failed: list[Option]):
    """`order`, then — only once an on-demand option in it had no capacity — `fallbacks` not tried yet.

    Planners take on-demand to always launch; a cloud out of on-demand capacity in one zone
    (AWS ``InsufficientInstanceCapacity``) must not leave the safety net without a group while
    other zones could run it.
    """
    tried = set()
    for option in order:
        tried.add(option)
        yield option
        if option is None:
            return  # IDLE ends the walk: it always "succeeds"
    if not any(o is not None and o.mode is Mode.ON_DEMAND for o in failed):
        return
    for option in fallbacks:
        if option not in tried:
            yield option


def launch_group(
    cloud: Cloud,
    request: LaunchRequest,
    *,
    old: GroupHandle | None,
    source_zone: str | None,
    size_gb: float,
    tags: dict | None,
) -> tuple[GroupHandle, str | None]:
    """Launch (or find) `request`'s group in the one order of the module docstring.

    Returns the group and the zone its checkpoint was copied from (None when nothing was copied).
    :raises CapacityError: no capacity (the old group, if any, keeps running).
    :raises CloudApiError: the cloud API would not take the launch.
    """
    handle = cloud.find(request.client_token)
    copied = None
    if handle is None:
        if old is None and not request.spot:
            copied = move_checkpoint(cloud, source_zone, request.zone, size_gb, request.job_id, tags)
        handle = cloud.launch(request)
        if old is None and request.spot:
            copied = move_checkpoint(cloud, source_zone, request.zone, size_gb, request.job_id, tags)
    elif old is None:
        # Made by a launcher that died before it recorded the group: the copy may be missing.
        copied = move_checkpoint(cloud, source_zone, request.zone, size_gb, request.job_id, tags)
    moved_from = _settle(cloud, handle, old, source_zone, size_gb, request.job_id, tags)
    return handle, copied or moved_from


def _settle(
    cloud: Cloud,
    handle: GroupHandle,
    old: GroupHandle | None,
    source_zone: str | None,
    size_gb: float,
    job_id: str,
    tags: dict | None,
) -> str | None:
    """After a launch: end the old group, then copy the checkpoint it left (a move's rule)."""
    if old is None or old == handle:
        return None
    cloud.terminate(old)
    return move_checkpoint(cloud, source_zone, handle.zone, size_gb, job_id, tags)


def _unanswered(cloud: Cloud, request: LaunchRequest, exc: CloudApiError) -> GroupHandle | None:
    """The group a launch the API never answered started after all, None when it started none."""
    try:
        return cloud.find(request.client_token)
    except Exception as lookup:  # noqa: BLE001 - any failure here means "cannot tell"
        raise CloudApiError(
            f"{exc}; whether launch {request.client_token} started a group cannot be told either "
            f"({type(lookup).__name__}: {lookup}); a retry of the task settles it by its client token"
        ) from exc


def move_checkpoint(
    cloud: Cloud, source_zone: str | None, target_zone: str, size_gb: float, job_id: str, tags: dict | None
) -> str | None:
    """Copy the job's checkpoint to `target_zone`; the source zone when something was copied, else None."""
    if source_zone is None or source_zone == target_zone:
        return None
    copied = cloud.copy_checkpoint(source_zone, target_zone, size_gb, job_id=job_id, tags=tags)
    return source_zone if copied else None


def _market(markets: dict[str, Market], option: Option) -> Market:
    try:
        return markets[option.market]
    except KeyError:
        raise ValueError(f"decision names market {option.market!r}, not among the job's {sorted(markets)}") from None


def _probes(
    cloud: Cloud, markets: dict[str, Market], keys, gang_size: int, tags: dict[str, str] | None
) -> list[ProbeResult]:
    """The decision's probes; one the cloud API refuses is skipped (a probe only informs)."""
    results = []
    for key in keys:
        market = markets[key]
        try:
            results.append(cloud.probe(market.region, market.zone, market.instance_type, gang_size, tags=tags))
        except CloudApiError:
            continue
    return results

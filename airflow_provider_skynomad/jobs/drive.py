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

The walk (`Walk`) and each launch (`attempt`) are separate steps, so that the caller
(`jobs.carry_out`) writes the request (and its client token) to the job's record *before* each
launch: a crash between writing and launching is then repaired by finding that token's group, or by
re-sending the same request, which the cloud answers with the same group. Every step returns what
it did; nothing here calls back into the caller.

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


@dataclass(frozen=True)
class Ground:
    """Where the job stands when a decision is carried out: what runs, and where its checkpoint is."""

    current: GroupHandle | None
    current_option: Option | None
    checkpoint_zone: str | None
    checkpoint_gb: float
    job_id: str
    tags: dict[str, str] | None = None


@dataclass(frozen=True)
class Attempt:
    """One launch tried: the group it started or found (None: none), and why not when none.

    `api_error` set: the cloud API would not take the launch (and no group was found by its token);
    unset with no group: the zone had no capacity.
    """

    option: Option
    request: LaunchRequest
    handle: GroupHandle | None = None
    moved_from_zone: str | None = None
    api_error: str | None = None


class Walk:
    """A decision's options in the order they are tried, and what the tries came to.

    Iterate it for the next option (None: release, the `IDLE` option); hand each launch tried to
    `tried`, which returns the `DriveResult` once one launched. `stay`, `release` and `exhausted`
    end the walk the other ways (see the module docstring).
    """

    def __init__(self, decision: Decision, ground: Ground, *, fallbacks: tuple[Option, ...] = ()):
        self.decision, self.ground, self.fallbacks = decision, ground, fallbacks
        self.failed: list[Option] = []
        self.api_errors: list[str] = []
        self.probes: list[ProbeResult] = []

    def __iter__(self):
        return _with_fallbacks(self.decision.try_in_order, self.fallbacks, self.failed)

    def keeps(self, option: Option | None) -> bool:
        """Whether `option` is what already runs (it "launches" for free)."""
        return option is not None and self.ground.current is not None and option == self.ground.current_option

    def stay(self) -> DriveResult:
        """What runs stays: the option already running came first, or no move could be made."""
        ground = self.ground
        return DriveResult(
            ground.current, ground.current_option, failed=self.failed, probes=self.probes, api_errors=self.api_errors
        )

    def release(self, cloud: Cloud) -> DriveResult:
        """The planner chose idle: end what runs."""
        current = self.ground.current
        if current is not None:
            cloud.terminate(current)
        return DriveResult(None, None, failed=self.failed, terminated=current, probes=self.probes)

    def tried(self, attempt: Attempt) -> DriveResult | None:
        """Count `attempt`; the walk's result when it launched (or found) a group, else None (go on)."""
        if attempt.handle is None:
            self.failed.append(attempt.option)
            if attempt.api_error is not None:
                self.api_errors.append(attempt.api_error)
            return None
        return DriveResult(
            attempt.handle,
            attempt.option,
            launched=True,
            failed=self.failed,
            terminated=self.ground.current,
            moved_from_zone=attempt.moved_from_zone,
            probes=self.probes,
            api_errors=self.api_errors,
        )

    def exhausted(self) -> DriveResult:
        """Every option was tried and none launched.

        :raises CloudApiError: nothing launched because of the cloud API and the job has no group.
        """
        if self.ground.current is not None:  # a move that cannot be made leaves the job where it runs
            return self.stay()
        if self.api_errors:
            errors = self.api_errors
            raise CloudApiError(
                f"no group could be launched: {errors[-1]}; nothing of this job is running"
                + (f" ({len(errors)} launches refused)" if len(errors) > 1 else "")
            )
        # Nothing launched (every spot option was full): the job waits idle for the next step.
        return DriveResult(None, None, failed=self.failed, probes=self.probes)


def attempt(cloud: Cloud, request: LaunchRequest, option: Option, ground: Ground) -> Attempt:
    """Launch `request` for `option` through `launch_group`, and say what came of it.

    A launch the cloud API would not take may still have gone through unanswered: its token's
    group is looked up, and found it is the launch's result.

    :raises CloudApiError: even that lookup failed: whether a group runs cannot be told.
    """
    old, source, size, tags = ground.current, ground.checkpoint_zone, ground.checkpoint_gb, ground.tags
    try:
        handle, moved_from = launch_group(cloud, request, old=old, source_zone=source, size_gb=size, tags=tags)
    except CapacityError:
        return Attempt(option, request)
    except CloudApiError as exc:
        handle = _unanswered(cloud, request, exc)
        if handle is None:
            return Attempt(option, request, api_error=str(exc))
        moved_from = _settle(cloud, handle, old, source, size, request.job_id or ground.job_id, tags)
    return Attempt(option, request, handle, moved_from)


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


def market_of(markets: dict[str, Market], option: Option) -> Market:
    """The market `option` names, among the job's (a decision naming another is a planner bug)."""
    try:
        return markets[option.market]
    except KeyError:
        raise ValueError(f"decision names market {option.market!r}, not among the job's {sorted(markets)}") from None


def probe_markets(
    cloud: Cloud, markets: dict[str, Market], keys, gang_size: int, tags: dict[str, str] | None
) -> list[ProbeResult]:
    """The decision's probes; one the cloud API refuses is skipped (a probe only informs).

    `tags` (the job's) go on the probes, so the cloud can bill them to the job."""
    results = []
    for key in keys:
        market = markets[key]
        try:
            results.append(cloud.probe(market.region, market.zone, market.instance_type, gang_size, tags=tags))
        except CloudApiError:
            continue
    return results

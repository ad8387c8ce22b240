"""Carry out one planner Decision against a Cloud (the planner decides, a cloud only does).

Walk `try_in_order` front to back: the option already running "launches" for free; a spot launch
that meets no capacity (`CapacityError`) teaches us the zone is full and moves on; `IDLE` releases
everything. A launch elsewhere is a move: the new group is launched first, the old one is
terminated after it (so a failed move never leaves the job with nothing), then the job's latest
checkpoint is copied to the new zone — during the new group's cold start, before its workload
resumes. A move is a migration only when a checkpoint existed and was copied: a job that has
checkpointed nothing restarts anywhere for free.

`before_launch` runs before every launch so the caller can persist the request (and its client
token) first: a crash between persisting and launching is then repaired by finding that token's
group, or by re-sending the same request, which the cloud answers with the same group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..clouds.base import CapacityError, Cloud, GroupHandle, LaunchRequest, ProbeResult
from ..market.grid import Market
from ..planner.actions import Decision, Option


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
) -> DriveResult:
    """Execute `decision`; see the module docstring for the order of effects.

    `tags` (the job's) go on its probes and checkpoint copies, so the cloud can bill them to the job.
    """
    probes = [_probe(cloud, markets[key], gang_size, tags) for key in decision.probes]
    failed: list[Option] = []
    for option in decision.try_in_order:
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
            handle = cloud.launch(request)
        except CapacityError:
            failed.append(option)
            after_failure(request)
            continue
        if current is not None:
            cloud.terminate(current)
        moved_from = move_checkpoint(cloud, checkpoint_zone, market.zone, checkpoint_gb, job_id, tags)
        return DriveResult(
            handle, option, launched=True, failed=failed, terminated=current, moved_from_zone=moved_from, probes=probes
        )
    # Nothing launched (every spot option was full): the job waits idle for the next step.
    if current is not None:
        cloud.terminate(current)
    return DriveResult(None, None, failed=failed, terminated=current, probes=probes)


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


def _probe(cloud: Cloud, market: Market, gang_size: int, tags: dict[str, str] | None) -> ProbeResult:
    return cloud.probe(market.region, market.zone, market.instance_type, gang_size, tags=tags)

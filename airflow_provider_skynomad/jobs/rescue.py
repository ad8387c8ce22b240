"""The launches a trigger makes itself, when waiting for a worker could cost the deadline.

After a preemption the trigger relaunches the job where the planner says (spot or on-demand):
a worker may come minutes late when a pipeline holds every slot, and a preempted job waits for
nothing else. Under deadline pressure, when the planner's answer is on-demand, it puts up the
safety net the same way. It copies the checkpoint, launches and stops the old group, then tells
the worker what it did with its next event. One such launch per deferral; the client token is
``<job>-rescue-<seq>``: a re-run trigger (another triggerer took over) finds the same group instead
of launching a second one, and a worker whose event was lost finds it too (`adoption`), so a
rescue is never left running untracked. A pipeline whose worker slots are all taken can delay
the worker's bookkeeping, but not the rescue that keeps the deadline.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..clouds.base import CapacityError, Cloud, GroupHandle, LaunchRequest
from ..market.view import MarketView
from ..planner.actions import Mode, Option
from ..planner.job import JobSpec, JobState
from .drive import DriveResult, move_checkpoint

log = logging.getLogger(__name__)


def rescue_token(job_id: str, seq: int) -> str:
    """The client token of the rescue a trigger may launch while waiting on deferral `seq`."""
    return f"{job_id}-rescue-{seq}"


@dataclass(frozen=True)
class Rescue:
    """What the trigger needs to launch the safety net itself (plain data in its kwargs)."""

    job_id: str
    command: tuple[str, ...]
    env: dict
    tags: dict

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "command": list(self.command), "env": self.env, "tags": self.tags}

    @classmethod
    def from_dict(cls, data: dict | None) -> Rescue | None:
        if not data:
            return None
        return cls(data["job_id"], tuple(data["command"]), dict(data["env"]), dict(data["tags"]))


def launch_rescue(
    cloud: Cloud,
    view: MarketView,
    job: JobSpec,
    state: JobState,
    option: Option,
    rescue: Rescue,
    seq: int,
    group: GroupHandle | None,
) -> dict | None:
    """Launch `option` now (idempotent on its token); what was done as plain data, None on failure.

    A launch found by its token (a re-run trigger, after another made it) is taken as it is: the
    option reported is the group's own, not what the planner would choose now.
    """
    market = view.markets[view.index(option.market)]
    request = LaunchRequest(
        cloud=market.cloud,
        region=market.region,
        zone=market.zone,
        instance_type=market.instance_type,
        count=job.instances,
        spot=option.mode is Mode.SPOT,
        client_token=rescue_token(rescue.job_id, seq),
        command=rescue.command,
        env=dict(rescue.env),
        tags=rescue.tags,
        job_id=rescue.job_id,
    )
    checkpoint = state.checkpoint_market
    source = view.markets[view.index(checkpoint)].zone if checkpoint in view.keys else None
    try:
        handle = cloud.find(request.client_token)
        if handle is not None:  # launched by a trigger before this one, after it had copied the checkpoint
            market, option = _own_option(view, handle) or (market, option)
            moved = source if source not in (None, market.zone) else None
        else:
            # The checkpoint goes first: a group may boot in seconds, and its workload restores
            # whatever its zone holds when it starts. A launch refused after it costs one copy.
            moved = move_checkpoint(cloud, source, market.zone, job.checkpoint_gb, rescue.job_id, rescue.tags)
            handle = cloud.launch(request)
        if group is not None and group != handle:
            cloud.terminate(group)
    except CapacityError:
        log.info("no %s capacity in %s; the worker will decide what instead", option.mode.value, market.zone)
        return None
    except Exception:  # noqa: BLE001 - the worker carries the decision out instead
        log.exception("the trigger could not launch %s in %s; the worker will", option.mode.value, market.zone)
        return None
    return {
        "handle": handle.to_dict(),
        "option": option.to_dict(),
        "moved_from": moved,
        "terminated": group.to_dict() if group else None,
    }


def adoption(
    cloud: Cloud, view: MarketView, job_id: str, seq: int, rescued: dict | None, known: list[GroupHandle]
) -> DriveResult | None:
    """The rescue launched for deferral `seq` as a driver result (terminated filled in by the caller),
    from the event when it says, else found by its token; None when there is none, or it is known."""
    if rescued is None:
        handle = cloud.find(rescue_token(job_id, seq))
        own = _own_option(view, handle) if handle is not None else None
        if own is None:
            return None
        rescued = {"handle": handle.to_dict(), "option": own[1].to_dict()}
    handle = GroupHandle.from_dict(rescued["handle"])
    if handle in known:
        return None
    return DriveResult(
        handle, Option.from_dict(rescued["option"]), launched=True, moved_from_zone=rescued.get("moved_from")
    )


def _own_option(view: MarketView, handle: GroupHandle):
    """(market, option) a launched group runs as, from its zone and spot flag; None if the view lacks it."""
    market = next((m for m in view.markets if m.zone == handle.zone), None)
    if market is None:
        return None
    return market, Option(market.key, Mode.SPOT if handle.spot else Mode.ON_DEMAND)

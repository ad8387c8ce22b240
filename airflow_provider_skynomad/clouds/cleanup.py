"""What `skynomad cleanup` ends: instances, spot requests and checkpoints left by jobs that no longer run.

Pure: the resources a cloud lists by SkyNomad's tags (`Cloud.resources()`), which job ids are still
running, and which ended when → a `CleanupPlan` saying what to release and what to keep, each with
its reason in plain words. Finding the resources, asking Airflow about the jobs and releasing are
done by the callers (`clouds/cleanup_commands.py`: the CLI and the probe DAG's task).

The rules:

- A job still running (its task instance is running, deferred, queued, scheduled, up for retry or
  reschedule, restarting, or cleared and not yet scheduled) keeps everything.
- A job whose state cannot be told (its resources lack the DAG/run/task tags, or Airflow did not
  answer) keeps everything: a wrong "no longer runs" would kill a live job.
- Instances and spot requests of any other job end, and so do a probe's leftovers (a probe
  releases what it was granted at once; anything still there leaked).
- Checkpoints of an ended job are kept `checkpoint_retention` after it ended (a cleared task can
  resume from them, a user can fetch the model), then deleted. A checkpoint whose job's end time is
  unknown is kept and listed, never deleted on a guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import pandas as pd

from .base import Resource

LIVE_STATES = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting", "none"}
)
"""Task-instance states of a job that may still run or be reconnected to ("none": cleared, not yet
scheduled; its next try reconnects to the job's group)."""

DEFAULT_CHECKPOINT_RETENTION = timedelta(days=7)


def is_live(state) -> bool:
    """Whether a task-instance state (an enum, a string or None) means the job may still run."""
    value = getattr(state, "value", state)
    return str(value).lower() in LIVE_STATES


@dataclass(frozen=True)
class Release:
    """One resource and why it is released (or kept)."""

    resource: Resource
    reason: str

    def words(self, verb: str) -> str:
        r = self.resource
        where = f" in {r.zone or r.region}" if (r.zone or r.region) else ""
        kind = r.kind.replace("_", " ")
        return f"{verb} {r.cloud} {kind} {r.id}{where}: {self.reason}"


@dataclass(frozen=True)
class CleanupPlan:
    release: tuple[Release, ...]
    keep: tuple[Release, ...]

    def summary(self, dry_run: bool = False, failed: set[str] | frozenset[str] = frozenset()) -> str:
        """One line: what was (or would be) ended, what could not be, what was kept."""
        kinds: dict[str, int] = {}
        for item in self.release:
            if item.resource.id not in failed:
                kinds[item.resource.kind] = kinds.get(item.resource.kind, 0) + 1
        ended = ", ".join(f"{n} {k.replace('_', ' ')}{'s' if n != 1 else ''}" for k, n in sorted(kinds.items()))
        words = f"{'would end' if dry_run else 'ended'} {ended or 'nothing'}"
        if failed:
            words += f"; {len(failed)} could not be ended"
        return f"{words}; kept {len(self.keep)} resource(s) of jobs that run or may resume"


def plan_cleanup(
    resources: Iterable[Resource],
    live: set[str],
    *,
    ended: dict[str, pd.Timestamp | None] | None = None,
    unknown: set[str] | frozenset[str] = frozenset(),
    now: pd.Timestamp | None = None,
    checkpoint_retention: timedelta = DEFAULT_CHECKPOINT_RETENTION,
    probe_leftovers: bool = True,
) -> CleanupPlan:
    """Decide what to release.

    :param resources: what the clouds list by SkyNomad's tags.
    :param live: job ids whose task may still run.
    :param ended: job ids known to have ended → when (None: the end time is unknown).
    :param unknown: job ids whose state could not be told (kept whole).
    :param now: for the checkpoint retention (UTC; default the wall clock).
    :param checkpoint_retention: how long an ended job's checkpoints are kept.
    :param probe_leftovers: end what probes left (False while probes may be in flight).
    """
    ended = dict(ended or {})
    now = pd.Timestamp.now(tz="UTC") if now is None else pd.Timestamp(now)
    release, keep = [], []
    for resource in resources:
        job = resource.job_id
        if job and job in live:
            keep.append(Release(resource, f"job {job} still runs"))
        elif job and job in unknown:
            keep.append(Release(resource, f"cannot tell whether job {job} still runs"))
        elif not job and not probe_leftovers and resource.kind != "checkpoint":
            keep.append(Release(resource, "a probe's, maybe still in flight (skynomad cleanup ends it)"))
        elif resource.kind != "checkpoint":
            why = f"job {job} no longer runs" if job else "left by a probe, which releases at once"
            release.append(Release(resource, why))
        elif not job:
            keep.append(Release(resource, "a checkpoint without a job tag: not deleted on a guess"))
        elif ended.get(job) is None:
            keep.append(Release(resource, f"job {job} no longer runs, but when it ended is unknown: kept"))
        else:
            end = pd.Timestamp(ended[job])
            until = end + pd.Timedelta(checkpoint_retention)
            if now >= until:
                release.append(Release(resource, f"job {job} ended {_ago(now - end)} ago, past the retention"))
            else:
                keep.append(
                    Release(resource, f"job {job} ended {_ago(now - end)} ago; kept until {until:%Y-%m-%d %H:%M} UTC")
                )
    return CleanupPlan(tuple(release), tuple(keep))


def _ago(delta: pd.Timedelta) -> str:
    hours = delta.total_seconds() / 3600.0
    if hours < 1:
        return f"{max(hours * 60, 0):.0f} min"
    if hours < 48:
        return f"{hours:.0f} h"
    return f"{hours / 24:.0f} days"

"""What `skynomad cleanup` ends: instances, spot requests and checkpoints left by jobs that ended.

Pure: the resources a cloud lists (`Cloud.resources()`), what Airflow says about the jobs behind
them (`JobFact` per job id) and this deployment's id → a `CleanupPlan` saying what to end and what
to keep, each with its reason in plain words. Listing, asking Airflow and releasing are done by the
callers (`clouds/cleanup_run.py`: the CLI and the probe DAG's task).

Cleanup runs on cloud accounts that other Airflows, other tools and people share, and a wrong
"ended" kills a live job, so a resource is ended only on proof:

- It carries this deployment's id (`clouds.tags.DEPLOYMENT`). Another deployment's resources, and
  resources with no deployment id, are kept whatever else they say.
- A probe's leftover is ``purpose=probe`` exactly (a probe releases what it got at once; anything
  still there leaked). No other job-less resource is ours to end. Fleets and launch templates are
  only ever a probe's (jobs launch from the user's template, which is never ours to delete).
- A job's resource ends only when its job is *known* ended: its task instance was found by its
  exact key (the DAG/run/task the resource names, whose hash is the job id), is in a final state,
  and ended longer ago than the grace period. A job Airflow has no task instance for, whose
  state or end time is not known, or whose tags do not match its id, is *unknown*: kept and listed.
- Checkpoints of an ended job are kept `checkpoint_retention` after it ended (a cleared task can
  resume from them, a user can fetch the model), then deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

import pandas as pd

from airflow_provider_skynomad.clouds.base import Resource
from airflow_provider_skynomad.clouds.tags import Owner

LIVE_STATES = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting", "none"}
)
"""Task-instance states of a job that may still run or be reconnected to ("none": cleared, not yet
scheduled; its next try reconnects to the job's group)."""
FINAL_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
"""Task-instance states after which the task runs no more unless cleared (then it is "none": live)."""

PROBE_ONLY_KINDS = frozenset({"fleet", "launch_template"})
"""Resource kinds SkyNomad creates only in probes: ended as a probe's leftover or not at all."""

DEFAULT_CHECKPOINT_RETENTION = timedelta(days=7)
DEFAULT_GRACE = timedelta(minutes=10)
"""How long after its task instance ended a job's instances are still left alone: the task's own
release may be in flight, and a clear in the meantime makes it live again."""


def _state(state) -> str:
    return str(getattr(state, "value", state)).lower()


def is_live(state) -> bool:
    """Whether a task-instance state (an enum, a string or None) means the job may still run."""
    return _state(state) in LIVE_STATES


def is_final(state) -> bool:
    return _state(state) in FINAL_STATES


@dataclass(frozen=True)
class JobFact:
    """What Airflow says about one job: ``live``, ``ended`` (with when, if known) or ``unknown`` (why)."""

    status: str
    ended_at: pd.Timestamp | None = None
    why: str = ""

    @classmethod
    def live(cls, why: str = "") -> JobFact:
        return cls("live", why=why)

    @classmethod
    def ended(cls, at, why: str = "") -> JobFact:
        return cls("ended", None if at is None else pd.Timestamp(at), why)

    @classmethod
    def unknown(cls, why: str) -> JobFact:
        return cls("unknown", why=why)


@dataclass(frozen=True)
class Release:
    """One resource and why it is ended (or kept)."""

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
        return f"{words}; kept {len(self.keep)} resource(s) not proven to be this deployment's ended jobs' or probes'"


def plan_cleanup(
    resources: Iterable[Resource],
    jobs: Mapping[str, JobFact],
    *,
    deployment: str | Mapping[str, str],
    now: pd.Timestamp | None = None,
    grace: timedelta = DEFAULT_GRACE,
    checkpoint_retention: timedelta = DEFAULT_CHECKPOINT_RETENTION,
    probe_leftovers: bool = True,
) -> CleanupPlan:
    """Decide what to end; everything not proven ended is kept, with the reason.

    :param resources: what the clouds list.
    :param jobs: job id → what Airflow says about it (a job missing here is unknown).
    :param deployment: this deployment's id, or ``{cloud name: id}`` when several clouds are listed.
    :param now: UTC, on Airflow's clock (the wall clock): end times are Airflow's.
    :param grace: an ended job's instances are left this long after its task instance ended.
    :param checkpoint_retention: how long an ended job's checkpoints are kept.
    :param probe_leftovers: end what probes left (False while probes may be in flight).
    """
    now = pd.Timestamp.now(tz="UTC") if now is None else pd.Timestamp(now)
    release, keep = [], []
    for resource in resources:
        ours = _ours(deployment, resource.cloud)
        end, reason = _decide(resource, jobs, ours, now, grace, checkpoint_retention, probe_leftovers)
        (release if end else keep).append(Release(resource, reason))
    return CleanupPlan(tuple(release), tuple(keep))


def _ours(deployment: str | Mapping[str, str], cloud: str) -> str:
    """This deployment's id for a resource of `cloud` (one id for all when the cloud is one: the
    simulated cloud lists its resources under the trace's cloud names)."""
    if isinstance(deployment, str):
        return deployment
    if cloud in deployment:
        return deployment[cloud]
    return next(iter(deployment.values())) if len(deployment) == 1 else ""


def _decide(resource, jobs, ours, now, grace, retention, probe_leftovers) -> tuple[bool, str]:
    owner = Owner.of(resource.tags or {}, resource.job_id)
    if not owner.deployment:
        return False, "no skynomad-deployment tag: not provably this deployment's"
    if owner.deployment != ours:
        return False, f"belongs to deployment {owner.deployment!r}, not this one ({ours!r})"
    if owner.is_probe and resource.kind != "checkpoint":
        if not probe_leftovers:
            return False, "a probe's, maybe still in flight (skynomad cleanup ends it)"
        return True, "left by a probe (purpose=probe), which releases what it gets at once"
    if resource.kind in PROBE_ONLY_KINDS:
        return False, f"a {resource.kind.replace('_', ' ')} that is not a probe's: not SkyNomad's to end"
    if not owner.job_id:
        purpose = f" (purpose={owner.purpose})" if owner.purpose else ""
        return False, f"neither a job's nor a probe's{purpose}: not SkyNomad's to end"
    job = owner.job_id
    fact = jobs.get(job) or JobFact.unknown("Airflow was not asked about it")
    if fact.status == "live":
        return False, f"job {job} still runs{_paren(fact.why)}"
    if fact.status != "ended":
        return False, f"unknown: cannot tell whether job {job} ended ({fact.why or 'no answer'})"
    if fact.ended_at is None:
        return False, f"unknown: job {job} ended, but when is not known{_paren(fact.why)}"
    since = now - pd.Timestamp(fact.ended_at)
    if resource.kind != "checkpoint":
        if since < pd.Timedelta(grace):
            return False, f"job {job} ended {_ago(since)} ago, within the {_ago(pd.Timedelta(grace))} grace period"
        return True, f"job {job} ended {_ago(since)} ago{_paren(fact.why)}"
    until = pd.Timestamp(fact.ended_at) + pd.Timedelta(retention)
    if now >= until:
        return True, f"job {job} ended {_ago(since)} ago, past the checkpoint retention"
    return False, f"job {job} ended {_ago(since)} ago; checkpoint kept until {until:%Y-%m-%d %H:%M} UTC"


def _paren(text: str) -> str:
    return f" ({text})" if text else ""


def _ago(delta: pd.Timedelta) -> str:
    hours = delta.total_seconds() / 3600.0
    if hours < 1:
        return f"{max(hours * 60, 0):.0f} min"
    if hours < 48:
        return f"{hours:.0f} h"
    return f"{hours / 24:.0f} days"

"""Who owns a cloud resource: the tags every SkyNomad resource carries, and how cleanup reads them back.

`skynomad cleanup` may end a resource only when it can prove the job behind it ended, so a
resource must say *exactly* which task instance launched it and which Airflow deployment it
belongs to, in a form the cloud keeps as written:

- AWS tags keep any value (up to 256 characters): the DAG, run and task ids go in as they are.
- GCP labels are lowercased and lose ``:`` ``+`` ``.`` (run ``manual__2026-12-03T08:00:00+00:00``
  becomes ``manual__2026-12-03t08-00-00-00-00``): the exact ids go into instance *metadata*, which
  GCP keeps verbatim, and labels are only for filtering in the console.
- Checkpoint prefixes carry no tags at all: the launch writes an owner record
  (``<job prefix>/skynomad-owner.json``) with the same fields.

The job id is a hash of the task instance key (`jobs.record.task_key_for`), so a claimed owner
is checked against it: tags that name another task instance than the job id's are not believed.
The deployment id comes from the connection (``cloud_options.deployment_id``); resources of another
deployment are never touched, whatever their tags say about jobs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

JOB = "skynomad-job"
DAG = "skynomad-dag"
RUN = "skynomad-run"
TASK = "skynomad-task"
MAP_INDEX = "skynomad-map-index"
TRY = "skynomad-try"
DEPLOYMENT = "skynomad-deployment"
PURPOSE_KEYS = ("skynomad:purpose", "skynomad-purpose")  # AWS tag key, GCP label key
JOB_ID_KEYS = (JOB, "skynomad:job-id", "skynomad-job-id")
PROBE = "probe"
OWNER_RECORD = "skynomad-owner.json"
"""The owner record's name inside a job's checkpoint prefix (written at launch, never by the agent)."""

EXACT_KEYS = (JOB, DAG, RUN, TASK, MAP_INDEX, TRY, DEPLOYMENT, "skynomad-purpose")
"""Keys whose values must survive the cloud unchanged (GCP: copied into instance metadata)."""

DEFAULT_DEPLOYMENT = "default"
DEPLOYMENT_ID = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


def check_deployment_id(value: str | None) -> str:
    """The connection's deployment id, validated: one form that is a valid AWS tag, GCP label and
    IAM condition value alike (so no cloud rewrites it)."""
    value = DEFAULT_DEPLOYMENT if value in (None, "") else str(value)
    if not DEPLOYMENT_ID.fullmatch(value):
        raise ValueError(
            "cloud_options.deployment_id: use 1-63 lowercase letters, digits and '-', "
            "starting with a letter (e.g. 'prod-airflow'); it tags every resource this Airflow launches"
        )
    return value


def job_tags(task, job_id: str, deployment_id: str | None = None, user_tags: Mapping | None = None) -> dict[str, str]:
    """The tags of a job's launches and probes: the user's, then SkyNomad's (which the user cannot override).

    :param task: the task instance's identity (anything with ``dag_id``, ``run_id``, ``task_id``,
        ``map_index``, ``try_number``: `jobs.contract.TaskIdentity`).
    :param job_id: the job's id (`jobs.record.job_id_for`).
    :param deployment_id: the connection's; None leaves it to the cloud, which adds its own at launch.
    :param user_tags: the operator's ``tags``; keys in SkyNomad's namespace are dropped, so a user tag
        cannot make a job's instance look like a probe's leftover or another job's.
    """
    tags = {str(k): str(v) for k, v in (user_tags or {}).items() if not _reserved(str(k))}
    tags |= {
        JOB: job_id,
        DAG: task.dag_id,
        RUN: task.run_id,
        TASK: task.task_id,
        MAP_INDEX: str(task.map_index),
        TRY: str(task.try_number),
    }
    if deployment_id is not None:
        tags[DEPLOYMENT] = check_deployment_id(deployment_id)
    return tags


def _reserved(key: str) -> bool:
    return key.lower().startswith(("skynomad-", "skynomad:", "skynomad_"))


@dataclass(frozen=True)
class Owner:
    """What a resource's tags say about who owns it (every field "" / None when not said)."""

    deployment: str
    job_id: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int | None
    purpose: str

    @classmethod
    def of(cls, tags: Mapping[str, str], job_id: str = "") -> Owner:
        def first(keys) -> str:
            return next((str(tags[k]) for k in keys if tags.get(k)), "")

        index = str(tags.get(MAP_INDEX, ""))
        return cls(
            deployment=str(tags.get(DEPLOYMENT, "")),
            job_id=job_id or first(JOB_ID_KEYS),
            dag_id=str(tags.get(DAG, "")),
            run_id=str(tags.get(RUN, "")),
            task_id=str(tags.get(TASK, "")),
            map_index=int(index) if re.fullmatch(r"-?\d+", index) else None,
            purpose=first(PURPOSE_KEYS),
        )

    @property
    def is_probe(self) -> bool:
        """Only ``purpose=probe`` exactly: ``Probe``, ``probe-web`` or ``web`` are someone else's."""
        return self.purpose == PROBE

    @property
    def names_task(self) -> bool:
        return bool(self.dag_id and self.run_id and self.task_id)

    def matches(self, map_index: int) -> bool:
        """Whether the job id is the hash of this DAG/run/task at `map_index` (tags not to be believed otherwise)."""
        if self.map_index is not None and self.map_index != map_index:
            return False
        return task_key_for(self.dag_id, self.run_id, self.task_id, map_index) == task_key_of(self.job_id)


def task_key_for(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """Stable, short, tag-safe key of one task instance: the prefix of every job id it starts."""
    digest = hashlib.sha256(f"{dag_id}\x00{run_id}\x00{task_id}\x00{map_index}".encode()).hexdigest()
    return f"sn-{digest[:16]}"


def job_id_for(dag_id: str, run_id: str, task_id: str, map_index: int, try_id: str) -> str:
    """The id of the job a task instance starts (client-token prefix, checkpoint folder).

    `try_id` is Airflow's id of the try that starts it, new for every try. Retries reconnect
    through the job record, so only a start names a job; a cleared task, or a run deleted and made
    again under its old run id, starts a new job instead of finding the last one's final checkpoint.
    """
    tail = re.sub(r"[^0-9a-z]", "", str(try_id).lower())[-8:] or "0"  # a UUID7's random end
    return f"{task_key_for(dag_id, run_id, task_id, map_index)}-{tail}"


def task_key_of(job_id: str) -> str:
    """The task instance's key inside a job id (an id without a try is the key itself)."""
    return "-".join(str(job_id).split("-")[:2])


def owner_record(tags: Mapping[str, str], job_id: str, deployment_id: str) -> dict[str, str]:
    """The owner record written beside a job's checkpoints at launch (their only tags)."""
    record = {k: str(tags[k]) for k in (DAG, RUN, TASK, MAP_INDEX) if tags.get(k) not in (None, "")}
    return {**record, JOB: job_id, DEPLOYMENT: deployment_id}


def exact_metadata(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags GCP must keep verbatim (instance metadata), from a launch's tags."""
    return {k: str(tags[k]) for k in EXACT_KEYS if tags.get(k) not in (None, "")}

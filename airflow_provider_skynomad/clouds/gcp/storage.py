"""A job's store in Cloud Storage, read and moved through the google provider's GCSHook.

The layout is the workload agent's (docs/agent.md): under ``gs://<bucket>/<prefix>/<job_id>/``
``checkpoints/<seq>/files/...`` then ``checkpoints/<seq>/MANIFEST.json`` (a checkpoint counts once
its manifest has landed), ``progress.json`` after it, and ``runs/<run_id>.json`` per agent run.

One bucket per region (``checkpoint_bucket`` with ``{region}``) keeps a job's checkpoint next
to its instances; a move copies the newest checkpoint the agent would restore, manifest last,
then writes a signed ``progress.json`` naming it, so the agent in the new region never restores a
half-copied one. A pattern without ``{region}`` is one (multi-region) bucket for every region: a
move copies nothing.

What instances wrote is evidence, not truth: progress, run records and manifests count only when
they verify with the job's key (agent/signing.py; `key_of` gives it, None without a signing
secret, and then nothing counts). Any instance of the deployment can write (and delete) in its
prefix; none can forge another job's signature.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_skynomad.clouds.base import Checkpointed, checkpointed

if TYPE_CHECKING:
    from airflow_provider_skynomad.agent.store import CheckpointStore

CHECKPOINTS = "checkpoints"
MANIFEST = "MANIFEST.json"
PROGRESS = "progress.json"


def _missing(exc: Exception) -> bool:
    return "NotFound" in type(exc).__name__ or "404" in str(exc)


class GcsStore:
    """The jobs' prefixes in the checkpoint buckets.

    :param hook: a GCSHook (its ``list``, ``copy``, ``delete`` and ``get_conn`` are used).
    :param bucket_pattern: bucket name, ``{region}`` filled in (no ``{region}``: one bucket for all).
    :param prefix: key prefix of every job's store (a job's is ``<prefix>/<job_id>``).
    :param key_of: the job's signing key for a job id (None: no signing secret, nothing verifies).
    """

    def __init__(
        self,
        hook: Any,
        bucket_pattern: str,
        prefix: str = "skynomad",
        key_of: Callable[[str], bytes | None] = lambda job_id: None,
    ) -> None:
        self.hook = hook
        self.bucket_pattern = bucket_pattern
        self.prefix = prefix.strip("/")
        self._key_of = key_of

    @property
    def one_bucket(self) -> bool:
        return "{region}" not in self.bucket_pattern

    def bucket(self, region: str) -> str:
        return self.bucket_pattern.format(region=region)

    def base(self, job_id: str) -> str:
        return f"{self.prefix}/{job_id}" if self.prefix else job_id

    def uri(self, region: str, job_id: str) -> str:
        """The agent's ``--store`` for this job in `region`."""
        return f"gs://{self.bucket(region)}/{self.base(job_id)}"

    # -- reads ---------------------------------------------------------------------------------

    def read_json(self, bucket: str, name: str) -> dict | None:
        """One object as JSON; None when it does not exist (or is not a JSON object)."""
        try:  # the hook's client, not its download(): that logs an error for every missing object
            data = json.loads(self.hook.get_conn().bucket(bucket).blob(name).download_as_bytes())
        except Exception as exc:
            if _missing(exc) or isinstance(exc, ValueError):
                return None
            raise
        return data if isinstance(data, dict) else None

    def checkpoints(self, bucket: str, job_id: str) -> CheckpointStore | None:
        """The job's store in `bucket` as its agent sees it, read with the job's key; None without a
        key (then nothing an instance wrote can be verified, and nothing counts)."""
        key = self._key_of(job_id)
        if key is None:
            return None
        from airflow_provider_skynomad.agent.backends import open_backend
        from airflow_provider_skynomad.agent.store import CheckpointStore

        uri = f"gs://{bucket}/{self.base(job_id)}"
        return CheckpointStore(uri, backend=open_backend(uri, self.hook.get_conn()), key=key)

    def progress(self, region: str, job_id: str) -> Checkpointed | None:
        """``step / total_steps`` of the job's signed ``progress.json`` (one GCS read), dated by its
        ``updated_at``; None without one, or when it does not verify with the job's key."""
        store = self.checkpoints(self.bucket(region), job_id)
        data = store.read_progress() if store is not None else None
        try:
            fraction = max(0.0, min(1.0, float(data["step"]) / float(data["total_steps"])))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            return None
        return checkpointed(fraction, data.get("updated_at"))

    def run_record(self, region: str, job_id: str, run_id: str) -> dict | None:
        """The agent's ``runs/<run_id>.json`` (outcome, exit code, stderr tail) signed with the job's key
        for that run; None until it wrote one, or when what is there does not verify."""
        store = self.checkpoints(self.bucket(region), job_id)
        return store.read_run(run_id) if store is not None else None

    def latest_checkpoint(self, bucket: str, job_id: str) -> tuple[dict, str, list[str]] | None:
        """(manifest, manifest object, its files' objects) of the newest checkpoint the job's agent
        would restore from `bucket`: its manifest verifies and every file it lists is there at its
        size; None when there is none."""
        store = self.checkpoints(bucket, job_id)
        if store is None:
            return None

        def present(seq: int, manifest: dict, entries: list) -> tuple[str, list[str]]:
            folder = f"{self.base(job_id)}/{CHECKPOINTS}/{seq:010d}/"
            blobs = self.hook.get_conn().list_blobs(bucket, prefix=f"{folder}files/")
            sizes = {blob.name: blob.size for blob in blobs}
            files = [f"{folder}files/{entry.path}" for entry in entries]
            for entry, name in zip(entries, files, strict=True):
                if sizes.get(name) != entry.size:
                    raise ValueError(f"{entry.path} is missing or not of its listed size")
            return f"{folder}{MANIFEST}", files

        found = store.newest(present)
        return None if found is None else (found[0], *found[1])

    def bucket_exists(self, bucket: str) -> bool:
        return self.hook.get_conn().lookup_bucket(bucket) is not None

    # -- moves ---------------------------------------------------------------------------------

    def copy(self, source_region: str, target_region: str, job_id: str) -> bool:
        """Make the newest checkpoint the agent would restore available in `target_region`, with a
        signed ``progress.json`` naming it; whether one existed.

        Nothing is copied when the target already holds a verified checkpoint as new or newer; a
        manifest there that does not verify (whatever its number) is no such checkpoint.
        """
        source, target = self.bucket(source_region), self.bucket(target_region)
        found = self.latest_checkpoint(source, job_id)
        if found is None:
            return False
        if source == target:
            return True  # one bucket for every region: it is there already
        manifest, manifest_name, files = found
        there = self.latest_checkpoint(target, job_id)
        if there is not None and there[0]["seq"] >= manifest["seq"]:
            return True
        for name in [*files, manifest_name]:  # the manifest last: a half-copied checkpoint never counts
            self.hook.copy(source_bucket=source, source_object=name, destination_bucket=target)
        self.checkpoints(target, job_id).write_progress(manifest)
        return True

    # -- leftovers -----------------------------------------------------------------------------

    def job_ids(self, bucket: str) -> list[str]:
        """The jobs with a store in `bucket` (one listing with a delimiter)."""
        root = f"{self.prefix}/" if self.prefix else ""
        prefixes = self.hook.list(bucket_name=bucket, prefix=root, delimiter="/")
        return sorted({p[len(root) :].strip("/") for p in prefixes if p.endswith("/")} - {""})

    def owner(self, bucket: str, job_id: str) -> dict[str, str]:
        """The job's owner record (clouds/tags.py) as tags; {"skynomad-job": job_id} when it has none
        or it names another job."""
        from airflow_provider_skynomad.clouds.tags import JOB, OWNER_RECORD

        record = self.read_json(bucket, f"{self.base(job_id)}/{OWNER_RECORD}")
        if not isinstance(record, dict) or record.get(JOB) != job_id:
            return {JOB: job_id}
        return {str(k): str(v) for k, v in record.items() if isinstance(v, (str, int))}

    def write_owner(self, region: str, job_id: str, record: dict) -> None:
        """Write the job's owner record beside its checkpoints in `region`'s bucket (at launch)."""
        from airflow_provider_skynomad.clouds.tags import OWNER_RECORD

        blob = self.hook.get_conn().bucket(self.bucket(region)).blob(f"{self.base(job_id)}/{OWNER_RECORD}")
        blob.upload_from_string(json.dumps(record, sort_keys=True), content_type="application/json")

    def delete_job(self, bucket: str, job_id: str) -> None:
        """Delete every object of the job's store in `bucket`; nothing to do when it is gone."""
        for name in self.hook.list(bucket_name=bucket, prefix=f"{self.base(job_id)}/"):
            try:
                self.hook.delete(bucket_name=bucket, object_name=name)
            except Exception as exc:
                if not _missing(exc):
                    raise

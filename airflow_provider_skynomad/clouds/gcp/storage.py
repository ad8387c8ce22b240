"""A job's store in Cloud Storage, read and moved through the google provider's GCSHook.

The layout is the workload agent's (docs/agent.md): under ``gs://<bucket>/<prefix>/<job_id>/``
``checkpoints/<seq>/files/...`` then ``checkpoints/<seq>/MANIFEST.json`` (a checkpoint counts once
its manifest has landed), ``progress.json`` after it, and ``runs/<run_id>.json`` per agent run.

One bucket per region (``checkpoint_bucket`` with ``{region}``) keeps a job's checkpoint next
to its instances; a move copies the newest complete checkpoint, manifest last, then
``progress.json``, so the agent in the new region never restores a half-copied one. A pattern
without ``{region}`` is one (multi-region) bucket for every region: a move copies nothing.
"""

from __future__ import annotations

import json
from typing import Any

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
    """

    def __init__(self, hook: Any, bucket_pattern: str, prefix: str = "skynomad") -> None:
        self.hook = hook
        self.bucket_pattern = bucket_pattern
        self.prefix = prefix.strip("/")

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

    def progress(self, region: str, job_id: str) -> float | None:
        """``step / total_steps`` of the newest complete checkpoint (one GCS read); None without one."""
        data = self.read_json(self.bucket(region), f"{self.base(job_id)}/{PROGRESS}")
        try:
            return max(0.0, min(1.0, float(data["step"]) / float(data["total_steps"])))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            return None

    def run_record(self, region: str, job_id: str, run_id: str) -> dict | None:
        """The agent's ``runs/<run_id>.json`` (outcome, exit code, stderr tail), None until it wrote one."""
        return self.read_json(self.bucket(region), f"{self.base(job_id)}/runs/{run_id}.json")

    def latest_checkpoint(self, bucket: str, job_id: str) -> tuple[str, list[str]] | None:
        """(manifest object, its files' objects) of the newest checkpoint whose manifest has landed and
        whose files are all there; None when there is none."""
        root = f"{self.base(job_id)}/{CHECKPOINTS}/"
        names = set(self.hook.list(bucket_name=bucket, prefix=root))
        manifests = sorted((n for n in names if n.endswith(f"/{MANIFEST}")), reverse=True)
        for manifest_name in manifests:  # the zero-padded seq sorts newest first
            manifest = self.read_json(bucket, manifest_name)
            if manifest is None:
                continue
            folder = manifest_name[: -len(MANIFEST)]
            files = [f"{folder}files/{entry['path']}" for entry in manifest.get("files", [])]
            if all(f in names for f in files):
                return manifest_name, files
        return None

    def bucket_exists(self, bucket: str) -> bool:
        return self.hook.get_conn().lookup_bucket(bucket) is not None

    # -- moves ---------------------------------------------------------------------------------

    def copy(self, source_region: str, target_region: str, job_id: str) -> bool:
        """Make the newest complete checkpoint of `job_id` available in `target_region`; whether one existed."""
        source, target = self.bucket(source_region), self.bucket(target_region)
        found = self.latest_checkpoint(source, job_id)
        if found is None:
            return False
        if source == target:
            return True  # one bucket for every region: it is there already
        manifest, files = found
        for name in [*files, manifest]:  # the manifest last: a half-copied checkpoint never counts
            self.hook.copy(source_bucket=source, source_object=name, destination_bucket=target)
        progress = f"{self.base(job_id)}/{PROGRESS}"
        try:
            self.hook.copy(source_bucket=source, source_object=progress, destination_bucket=target)
        except Exception as exc:
            if not _missing(exc):
                raise
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

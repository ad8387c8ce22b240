"""A job's checkpoint prefix in S3, as the workload agent lays it out (docs/agent.md), read by the adapter.

Under ``s3://<bucket>/<checkpoint_prefix>/<job_id>/``: the owner record the launch writes, and one
*instance store* per instance that ran the job, ``<ROLE_ID>:<INSTANCE_ID>/`` (its instance-profile
session's ``aws:userid``, the only prefix the instance policy lets it write), each holding
``checkpoints/<seq>/files/...`` with their ``MANIFEST.json`` written last, ``progress.json`` after
it, ``output/...`` on success and ``runs/<run_id>.json`` outcome records. Every method taking a
`job_id` also takes an instance store's path, ``<job_id>/<ROLE_ID>:<INSTANCE_ID>``.

The bucket is per region (``checkpoint_bucket`` with ``{region}``: a move copies the newest
*complete* checkpoint, the one whose manifest landed, to the same path in the target bucket) or
one for every region (no ``{region}``: nothing is copied, an instance elsewhere reads across regions
and S3 bills that transfer as the copy would have been billed).

One S3 client per region (the bucket's), made by the amazon provider's ``S3Hook``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MANIFEST = "MANIFEST.json"
PROGRESS = "progress.json"
USERID_SEPARATOR = ":"  # in an instance store's name, ROLE_ID:INSTANCE_ID; never in a job id


class JobStore:
    """Reads and copies jobs' prefixes; `s3(region)` gives that region's boto3 S3 client."""

    def __init__(self, s3: Callable[[str], Any], bucket_pattern: str | None, prefix: str) -> None:
        self._s3 = s3
        self.bucket_pattern = bucket_pattern
        self.prefix = prefix.strip("/")

    @property
    def configured(self) -> bool:
        return bool(self.bucket_pattern)

    @property
    def per_region(self) -> bool:
        return bool(self.bucket_pattern) and "{region}" in self.bucket_pattern

    def bucket(self, region: str) -> str:
        if not self.bucket_pattern:
            raise ValueError(
                "aws cloud: no checkpoint bucket; set the skynomad connection's checkpoint_bucket "
                "(a name, or a pattern with {region} for one bucket per region)"
            )
        return self.bucket_pattern.format(region=region)

    def key(self, job_id: str, name: str = "") -> str:
        """``<prefix>/<job_id>/<name>`` (``name=""``: the job's prefix, with its slash)."""
        head = f"{self.prefix}/" if self.prefix else ""
        return f"{head}{job_id}/{name}"

    def uri(self, region: str, job_id: str) -> str:
        """The agent's ``--store``: ``s3://<bucket>/<prefix>/<job_id>`` (no trailing slash)."""
        return f"s3://{self.bucket(region)}/{self.key(job_id).rstrip('/')}"

    # -- reads ------------------------------------------------------------------------------

    def read_json(self, region: str, job_id: str, name: str) -> dict | None:
        """The JSON document ``<job prefix>/<name>``, None when it is absent (or not JSON)."""
        from botocore.exceptions import ClientError

        try:
            body = self._s3(region).get_object(Bucket=self.bucket(region), Key=self.key(job_id, name))["Body"].read()
            return json.loads(body)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        except ValueError:
            return None

    def progress(self, region: str, job_id: str) -> float | None:
        data = self.read_json(region, job_id, PROGRESS)
        try:
            return min(1.0, max(0.0, float(data["step"]) / float(data["total_steps"])))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            return None

    def run_record(self, region: str, job_id: str, run_id: str) -> dict | None:
        return self.read_json(region, job_id, f"runs/{run_id}.json")

    def newest_checkpoint(self, region: str, job_id: str) -> tuple[str, dict] | None:
        """(seq directory, manifest) of the newest checkpoint whose manifest landed, else None."""
        client, bucket = self._s3(region), self.bucket(region)
        base = self.key(job_id, "checkpoints/")
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base, Delimiter="/")
        seqs = sorted(p["Prefix"][len(base) :].rstrip("/") for page in pages for p in page.get("CommonPrefixes", []))
        for seq in reversed(seqs):
            manifest = self.read_json(region, job_id, f"checkpoints/{seq}/{MANIFEST}")
            if manifest is not None:
                return seq, manifest
        return None

    def instance_stores(self, region: str, job_id: str) -> list[str]:
        """Paths (``<job_id>/<ROLE_ID>:<INSTANCE_ID>``) of the job's instance stores in the region's bucket."""
        client, bucket = self._s3(region), self.bucket(region)
        base = self.key(job_id)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base, Delimiter="/")
        names = [p["Prefix"][len(base) :].rstrip("/") for page in pages for p in page.get("CommonPrefixes", [])]
        return [f"{job_id}/{name}" for name in sorted(names) if USERID_SEPARATOR in name]

    def instance_store(self, region: str, job_id: str, instance_id: str) -> str | None:
        """The store instance `instance_id` writes (its name ends in ``:<instance id>``), None before it wrote."""
        tail = f"{USERID_SEPARATOR}{instance_id}"
        return next((s for s in self.instance_stores(region, job_id) if s.endswith(tail)), None)

    def newest_store(self, region: str, job_id: str) -> tuple[str, str, dict] | None:
        """(store path, seq, manifest) of the job's newest complete checkpoint in the region, among its
        instance stores and the job's own prefix (where a copy from another cloud lands); None without one."""
        best: tuple[str, str, dict] | None = None
        for store in [job_id, *self.instance_stores(region, job_id)]:
            newest = self.newest_checkpoint(region, store)
            if newest is not None and (best is None or int(newest[0]) > int(best[1])):
                best = (store, *newest)
        return best

    def drop_checkpoints(self, region: str, store: str) -> None:
        """Delete the checkpoints of an instance store (its progress and run records stay: small, and
        read for the outcome of a group that ended)."""
        self.delete(region, f"{store}/checkpoints")

    def owner(self, region: str, job_id: str) -> dict[str, str]:
        """The job's owner record (clouds/tags.py) as tags; {"skynomad-job": job_id} when it has none
        or it names another job."""
        from airflow_provider_skynomad.clouds.tags import JOB, OWNER_RECORD

        record = self.read_json(region, job_id, OWNER_RECORD)
        if not isinstance(record, dict) or record.get(JOB) != job_id:
            return {JOB: job_id}
        return {str(k): str(v) for k, v in record.items() if isinstance(v, (str, int))}

    # -- writes -----------------------------------------------------------------------------

    def write_json(self, region: str, job_id: str, name: str, document: dict) -> None:
        """Write ``<job prefix>/<name>`` (the launch's owner record)."""
        body = json.dumps(document, sort_keys=True).encode()
        self._s3(region).put_object(Bucket=self.bucket(region), Key=self.key(job_id, name), Body=body)

    def copy_newest(self, source_region: str, target_region: str, job_id: str) -> bool:
        """Copy the newest complete checkpoint and progress.json; True when there was one.

        Files first, then the manifest, then progress.json: the target never shows a checkpoint
        whose files are not all there. Nothing is copied when the target already holds that
        checkpoint or a newer one, or when one bucket serves every region.
        """
        newest = self.newest_checkpoint(source_region, job_id)
        if newest is None:
            return False
        if self.bucket(source_region) == self.bucket(target_region):
            return True
        seq, manifest = newest
        there = self.newest_checkpoint(target_region, job_id)
        if there is not None and int(there[0]) >= int(seq):
            return True  # already copied (AwsCloud.launch brings it before the instances boot)
        names = [f"checkpoints/{seq}/files/{f['path']}" for f in manifest.get("files", [])]
        names += [f"checkpoints/{seq}/{MANIFEST}", PROGRESS]
        target = self._s3(target_region)
        for name in names:
            key = self.key(job_id, name)
            source = {"Bucket": self.bucket(source_region), "Key": key}
            if name == PROGRESS and self.read_json(source_region, job_id, PROGRESS) is None:
                continue
            target.copy(source, self.bucket(target_region), key, SourceClient=self._s3(source_region))
        return True

    def job_ids(self, region: str) -> list[str]:
        """Jobs with a prefix in the region's bucket (for `skynomad cleanup`); [] when the bucket is absent."""
        from botocore.exceptions import ClientError

        client, base = self._s3(region), self.key("", "").rstrip("/")
        base = f"{base}/" if base else ""
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket(region), Prefix=base, Delimiter="/"
            )
            return [p["Prefix"][len(base) :].rstrip("/") for page in pages for p in page.get("CommonPrefixes", [])]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchBucket", "404"):
                return []
            raise

    def delete(self, region: str, job_id: str) -> None:
        """Delete every key under the job's prefix; nothing there is fine."""
        client, bucket = self._s3(region), self.bucket(region)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=self.key(job_id))
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})

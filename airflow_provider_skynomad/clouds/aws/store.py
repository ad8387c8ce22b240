"""A job's checkpoint prefix in S3, as the workload agent lays it out (docs/agent.md), read by the adapter.

Under ``s3://<bucket>/<checkpoint_prefix>/<job_id>/``: the owner record the launch writes, and one
*instance store* per instance that ran the job, ``<ROLE_ID>:<INSTANCE_ID>/`` (its instance-profile
session's ``aws:userid``, the only prefix the instance policy lets it write), each holding
``checkpoints/<seq>/files/...`` with their ``MANIFEST.json`` written last, ``progress.json`` after
it, ``output/...`` on success and ``runs/<run_id>.json`` outcome records. Every method taking a
`job_id` also takes an instance store's path, ``<job_id>/<ROLE_ID>:<INSTANCE_ID>``, and reads it
with the key of the job whose prefix it is in (`job_of`).

The bucket is per region (``checkpoint_bucket`` with ``{region}``: a move copies the newest
*complete* checkpoint, the one whose manifest landed, to the same path in the target bucket) or
one for every region (no ``{region}``: nothing is copied, an instance elsewhere reads across regions
and S3 bills that transfer as the copy would have been billed).

One S3 client per region (the bucket's), made by the amazon provider's ``S3Hook``.

What instances wrote there is evidence, not truth: progress, run records, checkpoints and output
count only when they verify with the job's key (agent/signing.py; `key_of` gives it, None without
a signing secret, and then nothing counts), whichever instance store holds them. An instance may
write under its own name in *any* job's prefix of the deployment (the instance policy names the
session, not the job), so a store in a job's prefix proves nothing by being there. The newest
checkpoint of a store is the one the agent would restore (`CheckpointStore.newest`), and the job's
newest store is the one holding the newest of those (`newest_store`), so a forged manifest, in any
store of the source or the target, neither travels nor blocks a copy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_skynomad.clouds.base import Checkpointed, checkpointed

if TYPE_CHECKING:
    from airflow_provider_skynomad.agent.store import CheckpointStore

MANIFEST = "MANIFEST.json"
PROGRESS = "progress.json"
USERID_SEPARATOR = ":"  # in an instance store's name, ROLE_ID:INSTANCE_ID; never in a job id


def job_of(store: str) -> str:
    """The job id of a job's prefix or of one of its instance stores (``<job_id>/<ROLE_ID>:<INSTANCE_ID>``)."""
    return store.split("/", 1)[0]


class JobStore:
    """Reads and copies jobs' prefixes; `s3(region)` gives that region's boto3 S3 client and
    `key_of(job_id)` the job's signing key (None: no signing secret, nothing verifies)."""

    def __init__(
        self,
        s3: Callable[[str], Any],
        bucket_pattern: str | None,
        prefix: str,
        key_of: Callable[[str], bytes | None] = lambda job_id: None,
    ) -> None:
        self._s3 = s3
        self.bucket_pattern = bucket_pattern
        self.prefix = prefix.strip("/")
        self._key_of = key_of

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

    def checkpoints(self, region: str, job_id: str) -> CheckpointStore | None:
        """The job's prefix (or one of its instance stores) in `region` as its agent sees it, read
        with the job's key; None without a key (then nothing an instance wrote can be verified, and
        nothing counts)."""
        key = self._key_of(job_of(job_id))
        if key is None:
            return None
        from airflow_provider_skynomad.agent.backends import open_backend
        from airflow_provider_skynomad.agent.store import CheckpointStore

        uri = self.uri(region, job_id)
        return CheckpointStore(uri, backend=open_backend(uri, self._s3(region)), key=key)

    def progress(self, region: str, job_id: str) -> Checkpointed | None:
        """step / total_steps of the job's signed progress.json, dated by its `updated_at`; None when absent
        or it does not verify."""
        store = self.checkpoints(region, job_id)
        data = store.read_progress() if store is not None else None
        try:
            fraction = min(1.0, max(0.0, float(data["step"]) / float(data["total_steps"])))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            return None
        return checkpointed(fraction, data.get("updated_at"))

    def run_record(self, region: str, job_id: str, run_id: str) -> dict | None:
        """Run `run_id`'s record signed with the job's key; None when absent or it does not verify."""
        store = self.checkpoints(region, job_id)
        return store.read_run(run_id) if store is not None else None

    def output(self, region: str, store: str) -> dict | None:
        """The output manifest of a store (``output/MANIFEST.json``) signed with the job's key; None
        when absent or it does not verify."""
        checkpoints = self.checkpoints(region, store)
        return None if checkpoints is None else checkpoints.read_output()

    def newest_checkpoint(self, region: str, job_id: str) -> tuple[str, dict] | None:
        """(seq directory, manifest) of the newest checkpoint the job's agent would restore there:
        its manifest verifies and every file it lists is present at its size; else None."""
        store = self.checkpoints(region, job_id)
        if store is None:
            return None

        def present(seq: int, manifest: dict, entries: list) -> str:
            folder = f"checkpoints/{seq:010d}/"
            sizes = self._sizes(region, self.key(job_id, f"{folder}files/"))
            for entry in entries:
                if sizes.get(entry.path) != entry.size:
                    raise ValueError(f"{entry.path} is missing or not of its listed size")
            return f"{seq:010d}"

        found = store.newest(present)
        return None if found is None else (found[1], found[0])

    def _sizes(self, region: str, prefix: str) -> dict[str, int]:
        """Size of every object under `prefix`, by its key relative to it (one listing)."""
        pages = self._s3(region).get_paginator("list_objects_v2").paginate(Bucket=self.bucket(region), Prefix=prefix)
        return {o["Key"][len(prefix) :]: o["Size"] for page in pages for o in page.get("Contents", [])}

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
        """(store path, seq, manifest) of the job's newest checkpoint the agent would restore in the
        region, among its instance stores and the job's own prefix (where a copy from another cloud
        lands); None without one. A store whose manifests do not verify has none, whatever their numbers."""
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
        """Copy the newest checkpoint the agent would restore from `job_id` (a job's prefix or one of
        its instance stores) to the same path in the target, then a signed progress.json naming it;
        True when there was one.

        Files first, then the manifest, then progress.json: the target never shows a checkpoint
        whose files are not all there. Nothing is copied when any store of the job in the target
        already holds a verified checkpoint as new or newer, or when one bucket serves every region;
        a manifest there that does not verify (whatever its number) is no such checkpoint.
        """
        newest = self.newest_checkpoint(source_region, job_id)
        if newest is None:
            return False
        if self.bucket(source_region) == self.bucket(target_region):
            return True
        seq, manifest = newest
        there = self.newest_store(target_region, job_of(job_id))
        if there is not None and int(there[1]) >= int(seq):
            return True  # already copied (AwsCloud.launch brings it before the instances boot)
        names = [f"checkpoints/{seq}/files/{f['path']}" for f in manifest["files"]]
        names.append(f"checkpoints/{seq}/{MANIFEST}")
        target = self._s3(target_region)
        for name in names:
            key = self.key(job_id, name)
            source = {"Bucket": self.bucket(source_region), "Key": key}
            target.copy(source, self.bucket(target_region), key, SourceClient=self._s3(source_region))
        self.checkpoints(target_region, job_id).write_progress(manifest)
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

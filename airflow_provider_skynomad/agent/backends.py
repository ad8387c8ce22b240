"""Object stores the agent writes a job's checkpoints to: a local directory, S3 or GCS.

Four verbs are all the checkpoint layout needs (put a file, get a file, list keys under a
prefix, delete keys), so each backend stays a thin shim over its client. The cloud SDKs are
imported only when their scheme is used: an instance has one of them installed (``boto3`` on
AWS, ``google-cloud-storage`` on GCP), the simulated cloud neither, and the import alone of
boto3 costs a few hundred milliseconds the simulated cloud's agents must not pay.

Credentials are never an argument: boto3 and google-cloud-storage find the instance's own
(instance profile, service account). ``AWS_ENDPOINT_URL`` (boto3) and ``STORAGE_EMULATOR_HOST``
(google-cloud-storage) point them at moto or the GCS emulator in tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from airflow_provider_skynomad.exceptions import ObjectTooLarge, StoreError

_CHUNK = 1 << 20


def _over(key: str, limit: int | None, size: int | None) -> None:
    if limit is not None and size is not None and size > limit:
        raise ObjectTooLarge(key, limit, size)


def _copy_bounded(source, target, key: str, limit: int | None) -> None:
    """Copy the stream `source` to `target`, refusing (ObjectTooLarge) once it passes `limit` bytes."""
    copied = 0
    while chunk := source.read(_CHUNK if limit is None else min(_CHUNK, limit - copied + 1)):
        copied += len(chunk)
        _over(key, limit, copied)
        target.write(chunk)


class Backend:
    """Keys are '/'-separated paths relative to the store's prefix."""

    uri: str

    def put_file(self, local: Path, key: str) -> None:
        raise NotImplementedError

    def put_bytes(self, data: bytes, key: str) -> None:
        raise NotImplementedError

    def get_file(self, key: str, local: Path, max_bytes: int | None = None) -> bool:
        """Download `key` to `local`; False when there is no such key.

        With `max_bytes`, an object larger than that raises ObjectTooLarge before it is downloaded
        (its size is looked at first) or, if it grew meanwhile, as soon as the bytes read pass it.
        """
        raise NotImplementedError

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes | None:
        """The object's bytes, None when there is no such key; `max_bytes` as in `get_file`."""
        raise NotImplementedError

    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix` (a folder, ending in '/'), relative to the store's prefix."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        raise NotImplementedError


class FileBackend(Backend):
    """`file:///abs/path`: the simulated cloud's store (and a shared filesystem's)."""

    def __init__(self, root: Path):
        self.root = root
        self.uri = root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / key

    def put_file(self, local: Path, key: str) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)

    def put_bytes(self, data: bytes, key: str) -> None:
        """Replaced atomically: manifests and progress.json are read while they are rewritten.

        Not fsynced: readers need atomicity, not durability across a host crash (which a
        file:// store, the simulated cloud's, does not model), and at one checkpoint per ~0.1 s
        two fsyncs per checkpoint were most of an upload's time.
        """
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), 0o644)
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get_file(self, key: str, local: Path, max_bytes: int | None = None) -> bool:
        if max_bytes is None:
            try:
                shutil.copyfile(self._path(key), local)
            except FileNotFoundError:
                return False
            return True
        try:
            source = open(self._path(key), "rb")  # noqa: SIM115  (closed below; a missing key is no error)
        except FileNotFoundError:
            return False
        with source, open(local, "wb") as target:
            _over(key, max_bytes, os.fstat(source.fileno()).st_size)
            _copy_bounded(source, target, key, max_bytes)
        return True

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes | None:
        try:
            with open(self._path(key), "rb") as source:
                _over(key, max_bytes, os.fstat(source.fileno()).st_size)
                data = source.read() if max_bytes is None else source.read(max_bytes + 1)
        except (FileNotFoundError, IsADirectoryError):
            return None
        _over(key, max_bytes, len(data))
        return data

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        keys = []
        for dirpath, _, filenames in os.walk(base):
            for name in filenames:
                if not (name.startswith(".") and name.endswith(".tmp")):  # put_bytes' temp files
                    keys.append(Path(dirpath, name).relative_to(self.root).as_posix())
        return sorted(keys)

    def delete(self, keys: list[str]) -> None:
        parents = set()
        for key in keys:
            self._path(key).unlink(missing_ok=True)
            parents.add(self._path(key).parent)
        for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            while parent != self.root and parent.is_relative_to(self.root):
                try:
                    parent.rmdir()  # only if empty
                except OSError:
                    break
                parent = parent.parent


class S3Backend(Backend):
    """`s3://bucket/prefix`: boto3 with the instance profile's credentials."""

    def __init__(self, bucket: str, prefix: str, client=None):
        """`client`: a ready boto3 S3 client (the Airflow side passes its S3Hook's); default: the instance's."""
        try:
            import boto3
        except ImportError as exc:
            raise StoreError("an s3:// store needs boto3 (pip install boto3)") from exc
        self.bucket, self.prefix = bucket, prefix
        self.uri = f"s3://{bucket}/{prefix}"
        self.client = client or boto3.client("s3")
        from botocore.exceptions import ClientError

        self._client_error = ClientError

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_file(self, local: Path, key: str) -> None:
        self.client.upload_file(str(local), self.bucket, self._key(key))

    def put_bytes(self, data: bytes, key: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_file(self, key: str, local: Path, max_bytes: int | None = None) -> bool:
        """The size is asked first (HEAD); the download itself (parallel ranged GETs) stops, through
        its progress callback, once it has received more than `max_bytes`."""
        full = self._key(key)
        callback = None
        try:
            if max_bytes is not None:
                _over(key, max_bytes, self.client.head_object(Bucket=self.bucket, Key=full)["ContentLength"])
                received = [0]

                def callback(count: int) -> None:
                    received[0] += count
                    _over(key, max_bytes, received[0])

            self.client.download_file(self.bucket, full, str(local), Callback=callback)
        except self._client_error as exc:
            if _s3_not_found(exc):
                return False
            raise
        return True

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self._client_error as exc:
            if _s3_not_found(exc):
                return None
            raise
        with contextlib.closing(response["Body"]) as body:
            _over(key, max_bytes, response.get("ContentLength"))
            data = body.read() if max_bytes is None else body.read(max_bytes + 1)
        _over(key, max_bytes, len(data))
        return data

    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
            keys.extend(item["Key"][strip:] for item in page.get("Contents", ()))
        return sorted(keys)

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


def _s3_not_found(exc) -> bool:
    return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")


class GCSBackend(Backend):
    """`gs://bucket/prefix`: google-cloud-storage with the instance's service account."""

    def __init__(self, bucket: str, prefix: str, client=None):
        """`client`: a ready storage.Client (the Airflow side passes its GCSHook's); default: the instance's."""
        try:
            from google.api_core.exceptions import NotFound, PreconditionFailed
            from google.cloud import storage
        except ImportError as exc:
            raise StoreError("a gs:// store needs google-cloud-storage (pip install google-cloud-storage)") from exc
        self.prefix = prefix
        self.uri = f"gs://{bucket}/{prefix}"
        self.client = client or storage.Client()
        self.bucket = self.client.bucket(bucket)
        self._not_found = NotFound
        self._precondition_failed = PreconditionFailed

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_file(self, local: Path, key: str) -> None:
        self.bucket.blob(self._key(key)).upload_from_filename(str(local))

    def put_bytes(self, data: bytes, key: str) -> None:
        self.bucket.blob(self._key(key)).upload_from_string(data)

    def _sized_blob(self, key: str, max_bytes: int | None):
        """(blob, generation to pin) with its size checked first; (None, None) when absent."""
        if max_bytes is None:
            return self.bucket.blob(self._key(key)), None
        blob = self.bucket.get_blob(self._key(key))
        if blob is None:
            return None, None
        _over(key, max_bytes, blob.size)
        return blob, blob.generation  # that generation's size was checked: a replacement is refused

    def get_file(self, key: str, local: Path, max_bytes: int | None = None) -> bool:
        try:
            blob, generation = self._sized_blob(key, max_bytes)
            if blob is None:
                return False
            blob.download_to_filename(str(local), if_generation_match=generation)
        except self._not_found:
            local.unlink(missing_ok=True)  # the client leaves an empty file behind
            return False
        except self._precondition_failed as exc:
            local.unlink(missing_ok=True)
            raise ValueError(f"{key} was replaced while it was read") from exc
        return True

    def get_bytes(self, key: str, max_bytes: int | None = None) -> bytes | None:
        try:
            blob, generation = self._sized_blob(key, max_bytes)
            return None if blob is None else blob.download_as_bytes(if_generation_match=generation)
        except self._not_found:
            return None
        except self._precondition_failed as exc:
            raise ValueError(f"{key} was replaced while it was read") from exc

    def list(self, prefix: str) -> list[str]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(blob.name[strip:] for blob in self.client.list_blobs(self.bucket, prefix=self._key(prefix)))

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            with contextlib.suppress(self._not_found):  # deleted already: deleting is idempotent
                self.bucket.blob(self._key(key)).delete()


def open_backend(uri: str, client=None) -> Backend:
    """The backend for `uri`: ``file:///abs/path``, ``s3://bucket/prefix`` or ``gs://bucket/prefix``
    (`client`: a ready S3 or storage client for the object stores; default: the machine's credentials)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise StoreError(f"--store {uri!r}: expected file:///abs/path, s3://bucket/prefix or gs://bucket/prefix")
    if scheme == "file":
        if not rest.startswith("/"):
            raise StoreError(f"--store {uri!r}: a file:// store needs an absolute path (file:///abs/path)")
        from urllib.parse import unquote

        return FileBackend(Path(unquote(rest)))
    if scheme in ("s3", "gs"):
        bucket, _, prefix = rest.partition("/")
        prefix = prefix.strip("/")
        if not bucket:
            raise StoreError(f"--store {uri!r}: no bucket name")
        return S3Backend(bucket, prefix, client) if scheme == "s3" else GCSBackend(bucket, prefix, client)
    raise StoreError(f"--store {uri!r}: unknown scheme {scheme!r}; use file://, s3:// or gs://")

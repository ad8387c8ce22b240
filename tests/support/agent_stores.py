"""Local stand-ins for the agent's stores, shared by the agent's tests: moto's S3 and the GCS emulator.

Each fixture yields a function ``uri(name) -> str`` giving a fresh prefix in a bucket it created,
with the environment (``AWS_ENDPOINT_URL`` / ``STORAGE_EMULATOR_HOST`` and fake keys) set for
this process and the agent subprocesses it starts. Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.network import free_port


@pytest.fixture(scope="module")
def moto_endpoint():
    """One moto server (S3) on localhost for the session; its URL."""
    moto_server = pytest.importorskip("moto.server")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_uri(moto_endpoint, monkeypatch):
    """``uri(name)`` → ``s3://<fresh bucket>/jobs/<name>`` on the moto server."""
    import boto3

    for key, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",  # moto's fake keys, not a credential
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return lambda name: f"s3://{bucket}/jobs/{name}"


@pytest.fixture(scope="module")
def gcs_endpoint():
    """One gcp-storage-emulator server on localhost for the session; its URL."""
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    port = free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def gs_uri(gcs_endpoint, monkeypatch):
    """``uri(name)`` → ``gs://<fresh bucket>/jobs/<name>`` on the emulator."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    from google.cloud import storage

    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    storage.Client().create_bucket(bucket)
    return lambda name: f"gs://{bucket}/jobs/{name}"

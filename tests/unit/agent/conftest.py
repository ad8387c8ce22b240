"""The local S3 (moto) and GCS (emulator) fixtures of tests/support/agent_stores.py, for every test here."""

from tests.support.agent_stores import gcs_endpoint, gs_uri, moto_endpoint, s3_uri  # noqa: F401 - fixtures

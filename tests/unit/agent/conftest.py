"""Makes tests/support/metadata_stub.py and agent_stores.py importable under any --import-mode (pyproject uses
importlib), and offers the local S3 and GCS fixtures of agent_stores to every test here."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from agent_stores import gcs_endpoint, gs_uri, moto_endpoint, s3_uri  # noqa: E402,F401  (fixtures for every test here)

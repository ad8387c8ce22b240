"""``[core] hostname_callable`` for the harness: each service reports the name it was started as.

Two workers and two triggerers share one host; Airflow records a task instance's and a job's
hostname, and the fault injectors pick their victim by it (the worker running a launch, the
triggerer holding triggers).
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("SKYNOMAD_HARNESS_HOSTNAME") or socket.getfqdn()

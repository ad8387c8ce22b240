"""What the Airflow-side benchmarks share: the simulated cloud and market table they run on, and
stand-ins for the task state store and the task instance.

Only names that existed before the job runtime moved to ``jobs/`` are used here, so a benchmark
built on this file also measures an older checkout (``PYTHONPATH=/old/checkout``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SPEED = 600.0
STEP_MINUTES = 10.0
TRACE_START_HOURS = 90.0


def setup(home: Path, speed: float = SPEED, trace_start_hours: float = TRACE_START_HOURS):
    """The `skynomad_default` connection (simulated cloud at `speed`x, starting `trace_start_hours`
    into the bundled week) and a market table around its start."""
    os.environ["SKYNOMAD_HOME"] = str(home)
    os.environ["AIRFLOW_CONN_SKYNOMAD_DEFAULT"] = json.dumps(
        {
            "conn_type": "skynomad",
            "extra": {"cloud": "simulated", "speed": speed, "cloud_options": {"trace_start": trace_start_hours}},
        }
    )
    import pandas as pd

    from airflow_provider_skynomad.hooks.skynomad import bundled_trace
    from airflow_provider_skynomad.market.observations import read_observations
    from airflow_provider_skynomad.market.store.table import MarketTable

    frame = read_observations(bundled_trace())
    start = frame["observed_at"].min() + pd.Timedelta(hours=trace_start_hours)
    table = MarketTable()
    table.create()
    table.append(
        frame[
            (frame["observed_at"] <= start + pd.Timedelta(hours=30))
            & (frame["observed_at"] >= start - pd.Timedelta(hours=48))
        ]
    )
    table.close()


class Store:
    def __init__(self):
        self.data = {}

    def get(self, key, default=None):
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key, value, *, retention=None):
        self.data[key] = json.dumps(value)


class TI:
    dag_id, run_id, task_id, map_index, try_number = "bench", "run", "job", -1, 1

    def xcom_push(self, key, value):
        pass

"""Traces and a job for `skynomad evaluate`: three GCP zones probed every 10 minutes, capacity coming
and going. Shared by tests/unit/cli/ and tests/integration/cli/."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from airflow_provider_skynomad.market.observations import COLUMNS

ZONES = [("us-central1", "us-central1-a"), ("us-central1", "us-central1-b"), ("europe-west1", "europe-west1-c")]
JOB = ["--work-hours", "1.0", "--deadline-hours", "1.5", "--cold-start-hours", "0.2", "--checkpoint-gb", "10"]


def trace_lines(hours: float = 6.0, seed: int = 0) -> list[str]:
    """A valid trace: 3 zones probed every 10 minutes, capacity coming and going."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2025-10-04T00:00:00Z")
    lines = [",".join(COLUMNS)]
    up = [True, False, True]
    for k in range(int(hours * 6) + 1):
        t = (start + pd.Timedelta(minutes=10 * k)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for j, (region, zone) in enumerate(ZONES):
            if rng.random() < 0.15:
                up[j] = not up[j]
            available = int(rng.integers(1, 17)) if up[j] else 0
            spot = [2.1, 1.8, 2.6][j] * (1 + 0.05 * math.sin(k / 5))
            on_demand = [10.3, 10.3, 11.2][j]
            lines.append(f"{t},gcp,{region},{zone},a3-highgpu-1g,H100,1,16,{available},{spot:.4f},{on_demand}")
    return lines


def write_trace(tmp_path: Path, lines: list[str], name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def strict_json(text: str):
    def reject(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=reject)

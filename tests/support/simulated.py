"""The simulated cloud in tests: tiny synthetic traces, launch requests, process checks, cleanup.

Shared by the simulated cloud's unit tests (tests/unit/clouds/simulated/) and the ones that run real
workloads or several processes against it (tests/integration/clouds/test_simulated_*.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import GroupHandle, LaunchRequest
from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.grid import Market
from tests.support.waiting import wait_for  # noqa: F401 - the tests that use these helpers import it from here

FAST = 36000.0  # simulated seconds per wall second: 1 simulated hour = 0.1 s
START = pd.Timestamp("2025-01-01T00:00:00Z")
SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")
JOB = "job-a"  # the job every request() belongs to unless a test says otherwise

# The simulated cloud charges the planner's public list prices (market.egress). The synthetic
# regions r1 and r2 share no known continent, so a copy between them is priced as intercontinental.
_R1A = Market("r1-a", "gcp", "r1", "r1-a", "g1")
SAME_REGION_USD_PER_GB = EgressModel().usd_per_gb(_R1A, Market("r1-b", "gcp", "r1", "r1-b", "g1"))
CROSS_REGION_USD_PER_GB = EgressModel().usd_per_gb(_R1A, Market("r2-a", "gcp", "r2", "r2-a", "g1"))


def zone_rows(hour: int) -> list[tuple]:
    """(zone, region, available, spot $/h, on-demand $/h) at trace hour `hour`.

    r1-a loses capacity at hour 10 and regains it at hour 11; its spot price doubles at hour 5.
    """
    return [
        ("r1-a", "r1", 0 if hour == 10 else 4, 1.0 if hour < 5 else 2.0, 10.0),
        ("r1-b", "r1", 4, 1.5, 10.0),
        ("r2-a", "r2", 1, 3.0, 12.0),
    ]


def one_region_rows(hour: int) -> list[tuple]:
    """Two zones of r1, four instances each at $1/h spot all the time."""
    return [("r1-a", "r1", 4, 1.0, 10.0), ("r1-b", "r1", 4, 1.0, 10.0)]


def write_trace(path: Path, rows_at: Callable[[int], list[tuple]] = zone_rows, hours: int = 48) -> Path:
    """A trace CSV at `path`: hourly rows from START, `rows_at(hour)` giving each hour's zones."""
    rows = [
        {
            "observed_at": (START + pd.Timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cloud": "gcp",
            "region": region,
            "zone": zone,
            "instance_type": "g1",
            "accelerator": "H100",
            "accelerator_count": 1,
            "requested": 4,
            "available": available,
            "spot_price": spot,
            "on_demand_price": on_demand,
        }
        for h in range(hours)
        for zone, region, available, spot, on_demand in rows_at(h)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def request(
    zone: str = "r1-b", token: str = "job-1", spot: bool = True, count: int = 2, job_id: str = JOB, **kwargs
) -> LaunchRequest:
    region = zone.split("-")[0]
    return LaunchRequest(
        cloud="gcp",
        region=region,
        zone=zone,
        instance_type="g1",
        count=count,
        spot=spot,
        client_token=token,
        job_id=job_id,
        **kwargs,
    )


def handle_of(group: dict) -> GroupHandle:
    return GroupHandle.from_dict({k: group[k] for k in GroupHandle.__dataclass_fields__})


def terminate_leftovers(tmp_path: Path) -> None:
    """Terminate whatever a test left running in any state directory it made (even when it failed).

    A state directory whose URL had a password is skipped: its test ends its own groups (its database
    is gone by now)."""
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

    for config in tmp_path.rglob("cloud.json"):
        if "***" in (json.loads(config.read_text()).get("state_url") or ""):
            continue
        cloud = SimulatedCloud.attach(config.parent)
        for group in cloud.groups():
            cloud.terminate(handle_of(group))


def live_members(pgid: int) -> list[int]:
    """Pids of the process group that are alive (zombies excluded: they are dead, just unreaped)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.fixture
def no_leftover_groups(tmp_path):
    """Whatever a test leaves running (even when it fails) is terminated, so no test leaks processes.
    A module that starts groups uses it for every test: ``pytestmark = pytest.mark.usefixtures(...)``."""
    yield
    terminate_leftovers(tmp_path)

"""Issue 31, break 7: one market row naming a zone the cloud cannot use made every job without a zone
list refuse to start. A job leaves such zones out and names them in its log; a zone the job itself
lists is still refused, before anything is launched."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.multi import MultiCloud
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.usable_zones import leave_out_unusable
from airflow_provider_skynomad.market.observations import COLUMNS
from airflow_provider_skynomad.market.store.table import MarketTable
from tests.unit.jobs.conftest import Started


def _rows_naming(now, places: list[tuple[str, str, str]]) -> pd.DataFrame:
    """One fresh observation in each (cloud, region, zone), as a probe or another tool wrote it."""
    rows = [
        {
            "observed_at": now - pd.Timedelta(minutes=10), "cloud": cloud, "region": region, "zone": zone,
            "instance_type": "a3-highgpu-1g", "accelerator": "H100", "accelerator_count": 1, "requested": 1,
            "available": 1, "spot_price": 0.5, "on_demand_price": 10.0,
        }
        for cloud, region, zone in places
    ]  # fmt: skip
    return pd.DataFrame(rows)[COLUMNS]


@pytest.fixture
def stray_rows(cloud, now):
    """The market table of the `cloud` fixture, plus a row in a zone no cloud has and one in an AWS zone
    of a connection that has only a GCP cloud."""
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig

    with MarketTable(SkyNomadConfig.default().market_url) as table:
        table.append(_rows_naming(now, [("gcp", "mars", "mars-1"), ("aws", "us-east-1", "us-east-1a")]))
    return MultiCloud({"gcp": cloud})


def test_break_7_a_job_leaves_out_zones_the_cloud_cannot_use_and_names_them(stray_rows, caplog):
    with caplog.at_level(logging.WARNING, logger="test.jobs"):
        job = Started(stray_rows, work_hours=2.0, deadline_hours=6.0)
    try:
        record = job.record()
        assert record.zones and not {"mars-1", "us-east-1a"} & set(record.zones)
        assert all(zone.startswith(("us-", "europe-", "asia-")) for zone in record.zones)
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "mars-1" in said and "us-east-1a" in said and "cannot use" in said, said
        assert record.group is not None or record.pending is not None or record.timeline  # it started
    finally:
        job.close()


def test_a_zone_the_job_lists_itself_is_still_refused_before_anything_is_launched(stray_rows, now):
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
    from airflow_provider_skynomad.jobs.contract import TaskIdentity
    from airflow_provider_skynomad.jobs.params import JobParams
    from airflow_provider_skynomad.jobs.record import StateStore
    from airflow_provider_skynomad.jobs.run import JobRun
    from airflow_provider_skynomad.jobs.table import JobTable
    from airflow_provider_skynomad.jobs.worker import JobWorker

    config = SkyNomadConfig.default()
    params = JobParams(
        work_hours=2.0, command=(), env={}, instances=1, cold_start_hours=0.2, checkpoint_gb=10.0,
        policy="skynomad", policy_params={}, decision_step_minutes=10.0, zones=["us-central1-a", "us-east-1a"],
        market_lookback_hours=72.0,
        max_market_age=pd.Timedelta(hours=2).to_pytimedelta(),
    )  # fmt: skip
    task = TaskIdentity("dag", "manual__z", "job", -1, 1, 2, "0190a7e2-0000-7000-8000-0000000000aa")
    run = JobRun(
        params=params, config=config, cloud=stray_rows, store=StateStore(None), task=task,
        log=logging.getLogger("test.jobs"), table_factory=lambda: MarketTable(config.market_url),
    )  # fmt: skip
    runner = JobWorker(run=run, conn_id="skynomad_default", handoff=JobTable(config.market_url))
    try:
        with pytest.raises(SkyNomadInputError, match="us-east-1a"):
            runner.start(6.0)
    finally:
        runner.close()
    assert stray_rows.clouds["gcp"].launches == []


class Unusable:
    """A cloud that cannot use the zones it was told of, each for its reason."""

    def __init__(self, why: dict[str, str]):
        self.why, self.asked = why, []

    def unusable_zones(self, zones):
        self.asked.append(list(zones))
        return {zone: self.why[zone] for zone in zones if zone in self.why}


def test_zones_the_cloud_can_use_are_kept_in_order_and_nothing_is_said():
    log = logging.getLogger("test.usable")
    assert leave_out_unusable(Unusable({}), ["b", "a"], "gcp", log) == ["b", "a"]


def test_the_unusable_zones_are_left_out_and_named_with_their_reason(caplog):
    cloud = Unusable({"mars-1": "no such zone"})
    with caplog.at_level(logging.WARNING, logger="test.usable"):
        kept = leave_out_unusable(cloud, ["us-central1-a", "mars-1"], "gcp", logging.getLogger("test.usable"))
    assert kept == ["us-central1-a"] and cloud.asked == [["us-central1-a", "mars-1"]]
    assert "Leaving out 1 zone(s)" in caplog.text and "mars-1" in caplog.text and "no such zone" in caplog.text


def test_a_cloud_that_can_use_none_of_the_zones_is_an_input_error_naming_them():
    cloud = Unusable({"mars-1": "no such zone", "us-east-1a": "no aws cloud"})
    with pytest.raises(SkyNomadInputError, match="the gcp cloud cannot use any zone .*mars-1.*us-east-1a"):
        leave_out_unusable(cloud, ["us-east-1a", "mars-1"], "gcp", logging.getLogger("test.usable"))

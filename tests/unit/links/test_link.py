"""The extra link from a SkyNomad task to its job page."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_provider_skynomad.links.job import SkyNomadJobLink, job_page_path


def test_the_link_points_at_the_task_instances_job_page():
    key = SimpleNamespace(dag_id="my dag", run_id="manual__2026-01-01T00:00:00+00:00", task_id="train", map_index=-1)
    link = SkyNomadJobLink().get_link(None, ti_key=key)
    assert link.endswith("/skynomad/job/my%20dag/manual__2026-01-01T00%3A00%3A00%2B00%3A00/train")
    assert (
        job_page_path("d", "r", "t", 3, base_url="https://airflow.example/proxy/")
        == "/proxy/skynomad/job/d/r/t?map_index=3"
    )


def test_the_operator_carries_both_links():
    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

    names = [link.name for link in SkyNomadOperator.operator_extra_links]
    assert "SkyNomad job page" in names and "SkyNomad instance" in names

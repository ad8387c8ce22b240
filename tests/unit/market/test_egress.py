"""Egress prices between markets: same zone, same region, AWS table, GCP continents, cross-cloud."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_skynomad.market.egress import (
    EgressModel,
    FlatEgress,
    aws_inter_region_table,
    gcp_continent,
)
from airflow_provider_skynomad.market.grid import Market


def m(cloud: str, region: str, zone: str, instance_type: str = "t") -> Market:
    return Market(key=f"{zone}:{instance_type}", cloud=cloud, region=region, zone=zone, instance_type=instance_type)


MODEL = EgressModel()


def test_same_zone_is_free_even_across_instance_types():
    a = m("aws", "us-east-1", "us-east-1a", "p3.2xlarge")
    assert MODEL.usd_per_gb(a, a) == 0.0
    assert MODEL.usd_per_gb(a, m("aws", "us-east-1", "us-east-1a", "p3.8xlarge")) == 0.0


@pytest.mark.parametrize(
    "a, b",
    [
        (m("aws", "us-east-1", "us-east-1a"), m("aws", "us-east-1", "us-east-1f")),
        (m("gcp", "us-central1", "us-central1-a"), m("gcp", "us-central1", "us-central1-c")),
    ],
)
def test_same_region_other_zone_is_one_cent(a, b):
    assert MODEL.usd_per_gb(a, b) == pytest.approx(0.01)
    assert MODEL.usd_per_gb(b, a) == pytest.approx(0.01)


def test_aws_inter_region_prices_come_from_the_bundled_table():
    table = aws_inter_region_table()
    assert len(table) > 1000
    assert all(0.0 <= price <= 0.2 for price in table.values())
    east1, east2, west2 = (m("aws", r, r + "a") for r in ("us-east-1", "us-east-2", "us-west-2"))
    assert MODEL.usd_per_gb(east1, east2) == pytest.approx(table[("us-east-1", "us-east-2")]) == pytest.approx(0.01)
    assert MODEL.usd_per_gb(east1, west2) == pytest.approx(table[("us-east-1", "us-west-2")]) == pytest.approx(0.02)
    far = m("aws", "ap-east-2", "ap-east-2a")
    assert MODEL.usd_per_gb(far, east2) == pytest.approx(table[("ap-east-2", "us-east-2")])


def test_aws_pair_missing_from_the_table_falls_back_to_two_cents():
    assert ("us-east-1", "mars-north-1") not in aws_inter_region_table()
    assert MODEL.usd_per_gb(m("aws", "us-east-1", "us-east-1a"), m("aws", "mars-north-1", "mars-north-1a")) == 0.02


@pytest.mark.parametrize(
    "source, target, price",
    [
        ("us-central1", "us-west1", 0.02),
        ("us-central1", "northamerica-northeast1", 0.02),
        ("europe-west1", "europe-west3", 0.02),
        ("asia-southeast1", "asia-south2", 0.02),
        ("us-central1", "europe-west1", 0.05),
        ("europe-west3", "us-west1", 0.05),
        ("us-central1", "asia-southeast1", 0.08),
        ("europe-west1", "asia-south2", 0.08),
        ("australia-southeast1", "us-west1", 0.08),
        ("southamerica-east1", "europe-west1", 0.08),
    ],
)
def test_gcp_continent_rules(source, target, price):
    assert MODEL.usd_per_gb(m("gcp", source, source + "-a"), m("gcp", target, target + "-b")) == pytest.approx(price)


def test_gcp_continents():
    assert gcp_continent("us-central1") == gcp_continent("northamerica-northeast2") == "north-america"
    assert gcp_continent("europe-west4") == "europe"
    assert gcp_continent("asia-south2") == "asia"
    assert gcp_continent("australia-southeast1") == "oceania"


@pytest.mark.parametrize(
    "source, target, price",
    [
        (m("aws", "us-east-1", "us-east-1a"), m("gcp", "us-east1", "us-east1-b"), 0.09),
        (m("gcp", "us-east1", "us-east1-b"), m("aws", "us-east-1", "us-east-1a"), 0.12),
    ],
)
def test_cross_cloud_is_the_source_clouds_internet_egress(source, target, price):
    assert MODEL.usd_per_gb(source, target) == pytest.approx(price)


def test_matrix_is_from_by_to_with_a_free_diagonal():
    markets = (
        m("gcp", "us-central1", "us-central1-a"),
        m("gcp", "us-central1", "us-central1-b"),
        m("gcp", "europe-west1", "europe-west1-c"),
        m("aws", "us-east-1", "us-east-1a"),
    )
    matrix = MODEL.matrix(markets)
    assert matrix.shape == (4, 4)
    assert np.all(np.diag(matrix) == 0)
    assert matrix[0, 1] == pytest.approx(0.01)
    assert matrix[0, 2] == pytest.approx(0.05)
    assert matrix[0, 3] == pytest.approx(0.12) and matrix[3, 0] == pytest.approx(0.09)
    for i, a in enumerate(markets):
        for j, b in enumerate(markets):
            assert matrix[i, j] == MODEL.usd_per_gb(a, b)


def test_flat_egress_is_free_within_a_region_and_flat_between():
    flat = FlatEgress(0.02)
    a, b = m("gcp", "us-central1", "us-central1-a"), m("gcp", "us-central1", "us-central1-b")
    c = m("gcp", "asia-south2", "asia-south2-b")
    assert flat.usd_per_gb(a, b) == 0.0
    assert flat.usd_per_gb(a, c) == 0.02 == flat.usd_per_gb(c, a)
    assert flat.usd_per_gb(a, m("aws", "us-central1", "x")) == 0.02  # same region name, other cloud
    np.testing.assert_array_equal(flat.matrix((a, b, c)), [[0, 0, 0.02], [0, 0, 0.02], [0.02, 0.02, 0]])
    with pytest.raises(ValueError):
        FlatEgress(-0.01)

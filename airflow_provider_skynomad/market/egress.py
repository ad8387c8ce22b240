"""What moving a checkpoint between two markets costs, in USD per GB.

Rules (docs/market.md), cheapest first:
- same zone: free;
- same region, another zone: $0.01/GB (both AWS and GCP inter-zone rates);
- AWS across regions: the published pair price from the bundled `aws_egress_pricing.csv`
  (a pair missing from the table falls back to $0.02/GB, AWS's usual US inter-region rate);
- GCP across regions (premium tier, 2025 list): $0.02/GB within one continent, $0.05/GB
  between North America and Europe, $0.08/GB for any other pair of continents;
- across clouds: the source cloud's internet egress (AWS $0.09/GB, GCP $0.12/GB).
`FlatEgress` reproduces simpler models (the paper's artifact charged $0.02/GB between regions).
"""

from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources

import numpy as np

from airflow_provider_skynomad.market.grid import Market

SAME_REGION_USD_PER_GB = 0.01
AWS_DEFAULT_INTER_REGION_USD_PER_GB = 0.02
GCP_SAME_CONTINENT_USD_PER_GB = 0.02
GCP_NA_EU_USD_PER_GB = 0.05
GCP_INTERCONTINENTAL_USD_PER_GB = 0.08
INTERNET_USD_PER_GB = {"aws": 0.09, "gcp": 0.12}


def gcp_continent(region: str) -> str:
    """GCP region name → continent bucket used by its network pricing."""
    prefix = region.split("-")[0]
    return {
        "us": "north-america",
        "northamerica": "north-america",
        "europe": "europe",
        "asia": "asia",
        "australia": "oceania",
        "southamerica": "south-america",
        "me": "middle-east",
        "africa": "africa",
    }.get(prefix, prefix)


@lru_cache(maxsize=1)
def aws_inter_region_table() -> dict[tuple[str, str], float]:
    """The bundled AWS inter-region transfer price list, (from, to) → USD/GB."""
    path = resources.files("airflow_provider_skynomad") / "data" / "aws_egress_pricing.csv"
    with path.open() as handle:
        return {(r["from_region"], r["to_region"]): float(r["price_usd_per_gb"]) for r in csv.DictReader(handle)}


class EgressModel:
    """Public-list egress prices between markets (see module docstring for the rules)."""

    def usd_per_gb(self, source: Market, target: Market) -> float:
        if source.zone == target.zone and source.cloud == target.cloud:
            return 0.0
        if source.cloud != target.cloud:
            return INTERNET_USD_PER_GB.get(source.cloud, max(INTERNET_USD_PER_GB.values()))
        if source.region == target.region:
            return SAME_REGION_USD_PER_GB
        if source.cloud == "aws":
            return aws_inter_region_table().get((source.region, target.region), AWS_DEFAULT_INTER_REGION_USD_PER_GB)
        a, b = gcp_continent(source.region), gcp_continent(target.region)
        if a == b:
            return GCP_SAME_CONTINENT_USD_PER_GB
        if {a, b} == {"north-america", "europe"}:
            return GCP_NA_EU_USD_PER_GB
        return GCP_INTERCONTINENTAL_USD_PER_GB

    def matrix(self, markets: tuple[Market, ...]) -> np.ndarray:
        """(from × to) USD/GB over `markets`, for the planner and the optimum."""
        return np.array([[self.usd_per_gb(a, b) for b in markets] for a in markets])


class FlatEgress(EgressModel):
    """One price between regions, free within a region (the paper's artifact setting)."""

    def __init__(self, inter_region_usd_per_gb: float):
        if inter_region_usd_per_gb < 0:
            raise ValueError(f"egress price must be ≥ 0 USD/GB, got {inter_region_usd_per_gb}")
        self.inter_region_usd_per_gb = inter_region_usd_per_gb

    def usd_per_gb(self, source: Market, target: Market) -> float:
        same_region = source.region == target.region and source.cloud == target.cloud
        return 0.0 if same_region else self.inter_region_usd_per_gb

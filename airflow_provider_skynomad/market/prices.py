"""On-demand list prices per (cloud, region, instance type): a shipped, dated table, refreshable.

The probe results and the market table carry an on-demand price beside every spot price (the
planner's safety net is priced with it), so it must come from a table with a source and a date,
never from a dict typed into a connection. Two places, the newer first:

- ``$SKYNOMAD_HOME/prices/<cloud>-on-demand.json``: written by ``skynomad prices refresh --cloud
  aws|gcp`` from the cloud's own price API (AWS Price List ``GetProducts``; GCP Cloud Billing
  Catalog ``services.skus.list``) for a user who has access to it;
- ``airflow_provider_skynomad/data/prices/<cloud>-on-demand.json``: shipped with the package.

A table file is JSON: ``{cloud, unit, source, as_of, refresh, prices: [{region, instance_type,
usd_per_hour[, source]}]}``; a row's own ``source`` overrides the table's. Every report says which
table was used (`PriceTable.describe`). Public list prices change: refresh before trusting a figure.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from airflow_provider_skynomad.exceptions import PriceTableError

CLOUDS = ("aws", "gcp")
GCP_COMPUTE_SERVICE = "services/6F81-5844-456A"  # Compute Engine in the Cloud Billing Catalog

# What a GCP machine type is made of, for pricing it from the catalog's per-unit SKUs:
# (SKU family prefix, vCPUs, memory GB, GPU SKU prefix, GPUs). Extend as machine types are needed.
GCP_MACHINE_SHAPES: dict[str, tuple[str, int, float, str, int]] = {
    "a3-highgpu-1g": ("A3 Instance", 26, 234.0, "Nvidia H100 80GB GPU", 1),
    "a3-highgpu-8g": ("A3 Instance", 208, 1872.0, "Nvidia H100 80GB GPU", 8),
    "a2-highgpu-1g": ("A2 Instance", 12, 85.0, "Nvidia Tesla A100 GPU", 1),
    "a2-ultragpu-1g": ("A2 Instance", 12, 170.0, "Nvidia A100 80GB GPU", 1),
    "g2-standard-4": ("G2 Instance", 4, 16.0, "Nvidia L4 GPU", 1),
}
AWS_PRICING_REGION = "us-east-1"  # the Price List API answers from us-east-1 (and ap-south-1)


@dataclass
class PriceTable:
    """One cloud's on-demand prices: ``usd_per_hour(region, instance_type)`` → float or None."""

    cloud: str
    source: str
    as_of: str
    path: str
    unit: str = ""
    refresh: str = ""
    prices: dict[tuple[str, str], float] = field(default_factory=dict)
    row_sources: dict[tuple[str, str], str] = field(default_factory=dict)

    def usd_per_hour(self, region: str, instance_type: str) -> float | None:
        return self.prices.get((region, instance_type))

    def describe(self) -> str:
        """Which table this is, for reports: "aws on-demand prices, <source>, as of <date> (<path>)"."""
        return f"{self.cloud} on-demand prices, {self.source}, as of {self.as_of} ({self.path})"

    def to_dict(self) -> dict:
        rows = []
        for (region, instance_type), usd in sorted(self.prices.items()):
            row = {"region": region, "instance_type": instance_type, "usd_per_hour": usd}
            if (region, instance_type) in self.row_sources:
                row["source"] = self.row_sources[(region, instance_type)]
            rows.append(row)
        return {
            "cloud": self.cloud,
            "unit": self.unit,
            "source": self.source,
            "as_of": self.as_of,
            "refresh": self.refresh,
            "prices": rows,
        }

    def write(self, path: str | Path) -> Path:
        """One row per line, so a refresh shows as a readable diff."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.to_dict()
        head = {k: v for k, v in data.items() if k != "prices"}
        lines = [json.dumps(head, indent=1)[:-2] + ',\n "prices": [']
        lines.append(",\n".join("  " + json.dumps(row) for row in data["prices"]))
        lines.append(" ]\n}\n")
        path.write_text("\n".join(lines))
        self.path = str(path)
        return path

    @classmethod
    def read(cls, path: str | Path) -> PriceTable:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            table = cls(
                cloud=str(data["cloud"]),
                source=str(data["source"]),
                as_of=str(data["as_of"]),
                path=str(path),
                unit=str(data.get("unit", "")),
                refresh=str(data.get("refresh", "")),
            )
            for i, row in enumerate(data["prices"]):
                key = (str(row["region"]), str(row["instance_type"]))
                usd = float(row["usd_per_hour"])
                if not usd > 0:
                    raise PriceTableError(f"{path}: prices[{i}] usd_per_hour must be > 0, got {usd}")
                table.prices[key] = usd
                if row.get("source"):
                    table.row_sources[key] = str(row["source"])
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PriceTableError):
                raise
            raise PriceTableError(
                f"{path}: not a price table ({type(exc).__name__}: {exc}); expected JSON with cloud, source, "
                "as_of and prices: [{region, instance_type, usd_per_hour}]"
            ) from exc
        return table


def shipped_path(cloud: str) -> Path:
    return Path(str(resources.files("airflow_provider_skynomad") / "data" / "prices" / f"{cloud}-on-demand.json"))


def load_prices(cloud: str, path: str | Path | None = None) -> PriceTable:
    """`path` if given, else the user's refreshed table if there is one, else the shipped one."""
    if cloud not in CLOUDS:
        raise PriceTableError(f"no price table for cloud {cloud!r}; clouds with one: {', '.join(CLOUDS)}")
    if path is not None:
        return PriceTable.read(path)
    refreshed = refreshed_path(cloud)
    return PriceTable.read(refreshed if refreshed.exists() else shipped_path(cloud))


def refreshed_path(cloud: str) -> Path:
    """Where `skynomad prices refresh` writes (``$SKYNOMAD_HOME`` as hooks.skynomad reads it, no Airflow import)."""
    home = Path(os.environ.get("SKYNOMAD_HOME") or Path.home() / ".skynomad").expanduser()
    return home / "prices" / f"{cloud}-on-demand.json"


# -- refresh from the clouds' price APIs --------------------------------------------------------


def refresh_aws(client, regions: list[str], instance_types: list[str]) -> PriceTable:
    """Query the AWS Price List API (`client`: boto3 ``pricing`` in us-east-1) for each pair.

    Linux/UNIX, shared tenancy, no pre-installed software, capacity status ``Used`` (the price of
    a running instance, not of a reservation). A pair the API does not know is left out (and named
    in the table's ``source``); none found at all raises PriceTableError.
    """
    table = PriceTable(
        cloud="aws",
        source="AWS Price List API (pricing:GetProducts, AmazonEC2)",
        as_of=dt.date.today().isoformat(),
        path="",
        unit="USD per instance-hour, On-Demand, Linux/UNIX, shared tenancy, no pre-installed software",
        refresh="skynomad prices refresh --cloud aws",
    )
    missing = []
    for region in regions:
        for instance_type in instance_types:
            usd = _aws_price(client, region, instance_type)
            if usd is None:
                missing.append(f"{region}/{instance_type}")
            else:
                table.prices[(region, instance_type)] = usd
    if not table.prices:
        raise PriceTableError(f"AWS Price List API returned no on-demand price for {', '.join(missing)}")
    if missing:
        table.source += f"; not offered: {', '.join(missing)}"
    return table


def _aws_price(client, region: str, instance_type: str) -> float | None:
    filters = {
        "regionCode": region,
        "instanceType": instance_type,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    response = client.get_products(
        ServiceCode="AmazonEC2",
        Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
        FormatVersion="aws_v1",
        MaxResults=10,
    )
    prices = []
    for item in response.get("PriceList", []):
        product = json.loads(item) if isinstance(item, str) else item
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = float(dimension.get("pricePerUnit", {}).get("USD", 0) or 0)
                if dimension.get("unit", "Hrs") == "Hrs" and usd > 0:
                    prices.append(usd)
    return min(prices) if prices else None


def refresh_gcp(list_skus, regions: list[str], machine_types: list[str]) -> PriceTable:
    """Price GCP machine types from the Cloud Billing Catalog's per-unit SKUs.

    `list_skus()` yields Compute Engine SKUs as the REST API's JSON dicts (``description``,
    ``category.usageType``, ``serviceRegions``, ``pricingInfo[0].pricingExpression.tieredRates``).
    A machine type costs vCPUs × core SKU + GB × RAM SKU + GPUs × GPU SKU (on-demand usage type).
    """
    skus = [s for s in list_skus() if s.get("category", {}).get("usageType") == "OnDemand"]
    table = PriceTable(
        cloud="gcp",
        source=f"Cloud Billing Catalog API ({GCP_COMPUTE_SERVICE}/skus)",
        as_of=dt.date.today().isoformat(),
        path="",
        unit="USD per instance-hour, on-demand (vCPU + memory + GPUs of the machine type)",
        refresh="skynomad prices refresh --cloud gcp",
    )
    missing = []
    for machine_type in machine_types:
        if machine_type not in GCP_MACHINE_SHAPES:
            raise PriceTableError(
                f"machine type {machine_type!r} has no known shape; known: {', '.join(sorted(GCP_MACHINE_SHAPES))}"
            )
        family, vcpus, memory_gb, gpu, gpus = GCP_MACHINE_SHAPES[machine_type]
        for region in regions:
            core = _gcp_unit_price(skus, region, f"{family} Core")
            ram = _gcp_unit_price(skus, region, f"{family} Ram")
            gpu_usd = _gcp_unit_price(skus, region, gpu)
            if None in (core, ram, gpu_usd):
                missing.append(f"{region}/{machine_type}")
                continue
            table.prices[(region, machine_type)] = round(vcpus * core + memory_gb * ram + gpus * gpu_usd, 4)
    if not table.prices:
        raise PriceTableError(f"Cloud Billing Catalog has no on-demand SKUs for {', '.join(missing)}")
    if missing:
        table.source += f"; not offered: {', '.join(missing)}"
    return table


def _gcp_unit_price(skus: list[dict], region: str, prefix: str) -> float | None:
    for sku in skus:
        if region not in sku.get("serviceRegions", []) or not sku.get("description", "").startswith(prefix):
            continue
        for info in sku.get("pricingInfo", [])[:1]:
            for rate in info.get("pricingExpression", {}).get("tieredRates", []):
                money = rate.get("unitPrice", {})
                usd = float(money.get("units", 0) or 0) + float(money.get("nanos", 0) or 0) / 1e9
                if usd > 0:
                    return usd
    return None


def gcp_list_skus(gcp_conn_id: str = "google_cloud_default"):
    """`list_skus` for refresh_gcp through the google provider's credentials (REST, paged)."""

    def list_skus():
        from airflow.providers.google.common.hooks.base_google import GoogleBaseHook
        from googleapiclient.discovery import build

        credentials = GoogleBaseHook(gcp_conn_id=gcp_conn_id).get_credentials()
        skus = build("cloudbilling", "v1", credentials=credentials, cache_discovery=False).services().skus()
        token = None
        while True:
            page = skus.list(parent=GCP_COMPUTE_SERVICE, pageToken=token, currencyCode="USD").execute()
            yield from page.get("skus", [])
            token = page.get("nextPageToken")
            if not token:
                return

    return list_skus

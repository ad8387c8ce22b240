"""The on-demand price tables: shipped with a source and a date, refreshed from the clouds' price APIs
(stubbed here: botocore's Stubber for the AWS Price List API, a fake SKU list for the Cloud Billing
Catalog), and `skynomad prices show|refresh`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import boto3
import pytest
from botocore.stub import ANY, Stubber

from airflow_provider_skynomad.cli import main
from airflow_provider_skynomad.cli.prices import run_prices_refresh
from airflow_provider_skynomad.market.prices import (
    PriceTable,
    PriceTableError,
    load_prices,
    refresh_aws,
    refresh_gcp,
    refreshed_path,
    shipped_path,
)


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYNOMAD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_shipped_tables_name_their_source_and_date():
    for cloud, region, instance_type in [("aws", "us-east-1", "p3.2xlarge"), ("gcp", "us-central1", "a3-highgpu-8g")]:
        table = load_prices(cloud)
        assert table.path == str(shipped_path(cloud)) and table.source and table.as_of[:2] == "20"
        assert table.usd_per_hour(region, instance_type) > 0
        assert table.usd_per_hour(region, "no-such-type") is None
        assert table.describe().startswith(f"{cloud} on-demand prices, ")
    # the V100 price the bundled AWS trace was recorded with, and the GCP H100 one
    assert load_prices("aws").usd_per_hour("us-west-2", "p3.2xlarge") == 3.06
    assert load_prices("gcp").usd_per_hour("us-central1", "a3-highgpu-1g") == 10.3157


def test_a_refreshed_table_takes_precedence_and_a_bad_one_is_named(home):
    table = load_prices("aws")
    table.prices[("us-east-1", "p3.2xlarge")] = 2.5
    table.write(refreshed_path("aws"))
    assert load_prices("aws").usd_per_hour("us-east-1", "p3.2xlarge") == 2.5
    refreshed_path("aws").write_text('{"cloud": "aws"}')
    with pytest.raises(PriceTableError, match=r"aws-on-demand.json: not a price table"):
        load_prices("aws")


def _product(instance_type: str, region: str, usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type, "regionCode": region}},
            "terms": {
                "OnDemand": {
                    "SKU.JRTCKXETXF": {
                        "priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}
                    }
                }
            },
        }
    )


def test_refresh_aws_through_the_price_list_api(home, capsys):
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    stub = Stubber(client)

    def expect(region, instance_type, prices):
        filters = {
            "regionCode": region,
            "instanceType": instance_type,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
        stub.add_response(
            "get_products",
            {"FormatVersion": "aws_v1", "PriceList": prices},
            {
                "ServiceCode": "AmazonEC2",
                "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
                "FormatVersion": "aws_v1",
                "MaxResults": ANY,
            },
        )

    expect("us-east-1", "p5.48xlarge", [_product("p5.48xlarge", "us-east-1", "55.0400000000")])
    expect("us-west-2", "p5.48xlarge", [])  # not offered there
    with stub:
        args = SimpleNamespace(
            cloud="aws", regions="us-east-1,us-west-2", instance_types="p5.48xlarge", conn_id=None, output=None
        )
        assert run_prices_refresh(args, pricing_client=client) == 0
    stub.assert_no_pending_responses()
    table = load_prices("aws")
    assert table.path == str(refreshed_path("aws"))
    assert table.prices == {("us-east-1", "p5.48xlarge"): 55.04}
    assert "AWS Price List API" in table.source and "not offered: us-west-2/p5.48xlarge" in table.source
    assert "wrote 1 prices" in capsys.readouterr().out

    empty = Stubber(client)
    empty.add_response("get_products", {"PriceList": []}, None)
    with empty, pytest.raises(PriceTableError, match="no on-demand price for us-east-1/p5.48xlarge"):
        refresh_aws(client, ["us-east-1"], ["p5.48xlarge"])


def _sku(description, region, usd, usage="OnDemand"):
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {
        "description": description,
        "category": {"usageType": usage, "resourceFamily": "Compute"},
        "serviceRegions": [region],
        "pricingInfo": [{"pricingExpression": {"tieredRates": [{"unitPrice": {"units": str(units), "nanos": nanos}}]}}],
    }


def test_refresh_gcp_through_the_billing_catalog(home):
    skus = [
        _sku("A3 Instance Core running in Americas", "us-central1", 0.0321),
        _sku("A3 Instance Ram running in Americas", "us-central1", 0.0043),
        _sku("Nvidia H100 80GB GPU running in Americas", "us-central1", 9.0),
        _sku("Nvidia H100 80GB GPU running in Americas", "us-central1", 2.5, usage="Preemptible"),  # spot: not it
    ]
    args = SimpleNamespace(
        cloud="gcp", regions="us-central1,europe-west4", instance_types="a3-highgpu-8g", conn_id=None, output=None
    )
    assert run_prices_refresh(args, list_skus=lambda: iter(skus)) == 0
    table = load_prices("gcp")
    assert table.usd_per_hour("us-central1", "a3-highgpu-8g") == round(208 * 0.0321 + 1872 * 0.0043 + 8 * 9.0, 4)
    assert "not offered: europe-west4/a3-highgpu-8g" in table.source
    with pytest.raises(PriceTableError, match="has no known shape"):
        refresh_gcp(lambda: iter(skus), ["us-central1"], ["n1-standard-1"])


def test_prices_show_prints_the_table_in_use(capsys):
    assert main(["prices", "show", "--cloud", "aws"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("aws on-demand prices, ") and "as of 2025-05-31" in out
    assert "us-east-1          p5.48xlarge" in out
    assert main(["prices", "show"]) == 0
    assert "gcp on-demand prices" in capsys.readouterr().out


def test_a_table_round_trips(tmp_path):
    table = load_prices("gcp")
    again = PriceTable.read(table.write(tmp_path / "t.json"))
    assert (again.prices, again.source, again.as_of) == (load_prices("gcp").prices, table.source, table.as_of)

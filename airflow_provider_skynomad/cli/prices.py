"""`skynomad prices show|refresh`: the on-demand price tables (market/prices.py) in use, or rebuilt from
a cloud's price API."""

from __future__ import annotations

from airflow_provider_skynomad.market.prices import (
    AWS_PRICING_REGION,
    CLOUDS,
    gcp_list_skus,
    load_prices,
    refresh_aws,
    refresh_gcp,
    refreshed_path,
)


def add_prices_command(subparsers) -> None:
    p = subparsers.add_parser("prices", help="show or refresh the on-demand price tables")
    sub = p.add_subparsers(dest="prices_command", required=True)
    show = sub.add_parser("show", help="print the price table in use (refreshed if any, else shipped)")
    show.add_argument("--cloud", choices=CLOUDS, default=None, help="one cloud (default: both)")
    show.set_defaults(func=run_prices_show)
    refresh = sub.add_parser("refresh", help="rebuild a table from the cloud's price API (needs access to it)")
    refresh.add_argument("--cloud", choices=CLOUDS, required=True)
    refresh.add_argument("--regions", default=None, help="comma-separated (default: those of the current table)")
    refresh.add_argument("--instance-types", default=None, help="comma-separated (default: the current table's)")
    refresh.add_argument("--conn-id", default=None, help="aws_default / google_cloud_default connection to use")
    refresh.add_argument("--output", default=None, help="where to write (default: $SKYNOMAD_HOME/prices/)")
    refresh.set_defaults(func=run_prices_refresh)


def run_prices_show(args) -> int:
    for cloud in [args.cloud] if args.cloud else CLOUDS:
        table = load_prices(cloud)
        print(table.describe())
        print(f"  unit: {table.unit}")
        for (region, instance_type), usd in sorted(table.prices.items()):
            note = table.row_sources.get((region, instance_type))
            print(f"  {region:<18} {instance_type:<16} {usd:>10.4f}" + (f"  ({note})" if note else ""))
    return 0


def run_prices_refresh(args, pricing_client=None, list_skus=None) -> int:
    current = load_prices(args.cloud)
    regions = _csv(args.regions) or sorted({r for r, _ in current.prices})
    types = _csv(args.instance_types) or sorted({t for _, t in current.prices})
    if args.cloud == "aws":
        client = pricing_client or _aws_pricing_client(args.conn_id or "aws_default")
        table = refresh_aws(client, regions, types)
    else:
        table = refresh_gcp(list_skus or gcp_list_skus(args.conn_id or "google_cloud_default"), regions, types)
    path = table.write(args.output or refreshed_path(args.cloud))
    print(f"wrote {len(table.prices)} prices to {path}: {table.describe()}")
    return 0


def _aws_pricing_client(aws_conn_id: str):
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    return AwsBaseHook(aws_conn_id=aws_conn_id, client_type="pricing", region_name=AWS_PRICING_REGION).conn


def _csv(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]

"""SkyNomad connections: one form per cloud, several clouds through one connection, test_connection."""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace

import pytest

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="skynomad-connections-"))

from airflow_provider_skynomad.clouds.base import Cloud  # noqa: E402
from airflow_provider_skynomad.hooks import skynomad as hook_module  # noqa: E402
from airflow_provider_skynomad.hooks.skynomad import (  # noqa: E402
    SkyNomadConfig,
    SkyNomadConfigError,
    SkyNomadHook,
)


def conn(conn_type: str, **extra):
    return SimpleNamespace(conn_type=conn_type, extra_dejson=extra, host=None, login=None, password=None)


def hook_over(monkeypatch, conns: dict, conn_id: str = "sn") -> SkyNomadHook:
    def get_connection(conn_id):
        if conn_id not in conns:
            raise RuntimeError(f"The conn_id `{conn_id}` isn't defined")
        return conns[conn_id]

    hook = SkyNomadHook(conn_id)
    monkeypatch.setattr(hook, "get_connection", get_connection)
    return hook


def test_a_per_cloud_connection_turns_its_fields_into_the_clouds_options(tmp_path):
    config = SkyNomadConfig.from_connection(
        conn(
            "skynomad_aws",
            market_url=f"sqlite:///{tmp_path}/m.db",
            aws_conn_id="aws_prod",
            checkpoint_bucket="ckpt-{region}",
            regions='["us-east-1", "us-west-2"]',  # a form field holding JSON arrives as text
            probe_budget_usd_per_day="5",
            image_id="",  # an empty form field is "not set"
        )
    )
    assert config.cloud == "aws"
    assert config.aws_conn_id == "aws_prod" and config.checkpoint_bucket == "ckpt-{region}"
    assert config.cloud_options == {"regions": ["us-east-1", "us-west-2"]}
    assert config.probe_budget_usd_per_day == 5.0


def test_a_field_that_is_not_json_is_named(tmp_path):
    with pytest.raises(SkyNomadConfigError, match="subnets is not valid JSON"):
        SkyNomadConfig.from_connection(conn("skynomad_aws", subnets="{us-east-1a: subnet-1"))


def test_a_negative_probe_budget_is_refused():
    with pytest.raises(SkyNomadConfigError, match="probe_budget_usd_per_day"):
        SkyNomadConfig.from_connection(conn("skynomad", probe_budget_usd_per_day="-1"))


def test_one_connection_lists_several_clouds_and_keeps_its_own_market_table(monkeypatch, tmp_path):
    market = f"sqlite:///{tmp_path}/m.db"
    hook = hook_over(
        monkeypatch,
        {
            "sn": conn("skynomad", market_url=market, cloud_connections="sn_aws, sn_gcp"),
            "sn_aws": conn("skynomad_aws", aws_conn_id="aws_prod"),
            "sn_gcp": conn("skynomad_gcp", gcp_project="proj", source_instance_template="tpl"),
        },
    )
    config = hook.get_config()
    assert config.cloud == "multi" and config.clouds == ("aws", "gcp")
    assert config.market_url == market
    aws, gcp = config.parts
    assert aws.aws_conn_id == "aws_prod"
    assert gcp.gcp_project == "proj" and gcp.cloud_options == {"source_instance_template": "tpl"}
    assert config.to_dict()["parts"][1]["cloud"] == "gcp"  # plain data all the way down


def test_a_listed_cloud_connection_that_is_missing_or_of_another_type_is_named(monkeypatch):
    missing = hook_over(monkeypatch, {"sn": conn("skynomad", cloud_connections="sn_aws")})
    with pytest.raises(SkyNomadConfigError, match="'sn_aws' listed in cloud_connections of 'sn' is not defined"):
        missing.get_config()
    wrong = hook_over(monkeypatch, {"sn": conn("skynomad", cloud_connections="pg"), "pg": conn("postgres")})
    with pytest.raises(SkyNomadConfigError, match="lists 'pg', of type 'postgres'"):
        wrong.get_config()


def test_two_connections_of_one_cloud_are_refused(monkeypatch):
    hook = hook_over(
        monkeypatch,
        {
            "sn": conn("skynomad", cloud_connections="a,b"),
            "a": conn("skynomad_aws"),
            "b": conn("skynomad_aws"),
        },
    )
    with pytest.raises(SkyNomadConfigError, match="one skynomad_aws and/or one skynomad_gcp"):
        hook.get_config()


class _Checked(Cloud):
    """A cloud whose check() reports what a real one would find wrong."""

    name = "aws"

    def __init__(self, problems):
        self.problems = problems
        self.launched = 0

    def check(self, zones=None, instance_type=None):
        return list(self.problems)

    def launch(self, request):  # pragma: no cover - test_connection must never launch
        self.launched += 1
        raise AssertionError("test_connection launched something")

    find = poll = terminate = progress = probe = copy_checkpoint = launch


@pytest.mark.parametrize(
    ("problems", "ok", "says"),
    [
        ([], True, "aws cloud ready"),
        (["cloud_options.subnets has no subnet for us-east-1c"], False, "no subnet for us-east-1c"),
    ],
)
def test_test_connection_reports_what_the_cloud_check_finds_without_launching(
    monkeypatch, tmp_path, problems, ok, says
):
    cloud = _Checked(problems)
    hook = hook_over(monkeypatch, {"sn": conn("skynomad_aws", market_url=f"sqlite:///{tmp_path}/m.db")})
    monkeypatch.setattr(hook_module, "make_cloud", lambda config: cloud)
    assert hook.test_connection()[0] is ok
    assert says in hook.test_connection()[1]
    assert cloud.launched == 0


def test_test_connection_names_a_cloud_whose_extra_is_missing(monkeypatch, tmp_path):
    from airflow_provider_skynomad.utils.extras import MissingExtraError

    def missing(config):
        raise MissingExtraError("gcp", "airflow.providers.google")

    hook = hook_over(monkeypatch, {"sn": conn("skynomad_gcp", market_url=f"sqlite:///{tmp_path}/m.db")})
    monkeypatch.setattr(hook_module, "make_cloud", missing)
    ok, message = hook.test_connection()
    assert not ok and "airflow-provider-skynomad[gcp]" in message

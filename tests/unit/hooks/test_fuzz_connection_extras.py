"""Hostile connection extras through `SkyNomadConfig.from_connection` (hypothesis).

The promise: a `SkyNomadConfigError` (a ValueError naming the field), or a config whose fields
have the types and ranges the cloud and the market table rely on. What fuzzing found in
the hook (NaN and infinite speeds, JSON true taken as 1, numbers where names and paths belong)
is pinned by the tests after the property.
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadConfigError

INJECTION = "'; DROP TABLE market_observations; --"
VALUES = st.sampled_from(
    [
        "", " ", "nan", "NaN", "inf", "-inf", "-1", "0", "1e309", "abc", INJECTION, "{", "{bad json", "[1, 2]",
        '{"a": 1}', "{}", "[]", "\x00", 5, -5, 0, 1.5, float("nan"), float("inf"), True, False, None, [], {}, [1],
        {"nested": {"x": 1}}, "~/x", "s3://bucket",
    ]
) | st.text(max_size=12) | st.integers() | st.floats()  # fmt: skip
FIELDS = [
    "market_url", "cloud", "trace_path", "state_dir", "speed", "aws_conn_id", "gcp_conn_id", "gcp_project",
    "checkpoint_bucket", "cloud_options", "probe_budget_usd_per_day", "extra__skynomad__speed",
    "extra__skynomad__cloud", "unknown_field",
]  # fmt: skip


def _conn(extra: dict, conn_type: str = "skynomad", host: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        conn_type=conn_type, host=host, login="u", password="p", port=None, schema="db", extra_dejson=extra
    )


def _sane(config: SkyNomadConfig) -> None:
    assert isinstance(config.market_url, str) and config.market_url
    assert config.cloud in ("simulated", "aws", "gcp", "multi")
    assert isinstance(config.speed, float) and math.isfinite(config.speed) and config.speed > 0
    assert isinstance(config.trace_path, str) and isinstance(config.state_dir, str)
    assert isinstance(config.aws_conn_id, str) and isinstance(config.gcp_conn_id, str)
    assert config.gcp_project is None or isinstance(config.gcp_project, str)
    assert isinstance(config.cloud_options, dict)
    budget = config.probe_budget_usd_per_day
    assert budget is None or (isinstance(budget, float) and math.isfinite(budget) and budget >= 0)


@settings(max_examples=int(os.environ.get("SKYNOMAD_FUZZ_EXAMPLES", "60")) * 2, deadline=None)
@given(
    extra=st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=5),
    conn_type=st.sampled_from(["skynomad", "skynomad_aws", "skynomad_gcp", None]),
    host=st.sampled_from([None, "", "db.example", INJECTION]),
)
def test_from_connection_gives_a_sane_config_or_a_config_error(extra, conn_type, host):
    try:
        config = SkyNomadConfig.from_connection(_conn(extra, conn_type, host))
    except SkyNomadConfigError as exc:
        assert str(exc).startswith("skynomad connection")
        return
    _sane(config)


def test_a_nan_speed_is_a_config_error():
    with pytest.raises(SkyNomadConfigError, match="speed"):
        SkyNomadConfig.from_connection(_conn({"speed": "nan"}))


def test_an_infinite_speed_is_a_config_error():
    with pytest.raises(SkyNomadConfigError, match="speed"):
        SkyNomadConfig.from_connection(_conn({"speed": "inf"}))


@pytest.mark.parametrize("field", ["trace_path", "state_dir"])
def test_a_non_text_path_is_a_config_error(field):
    with pytest.raises(SkyNomadConfigError, match=field):
        SkyNomadConfig.from_connection(_conn({field: 5}))


@pytest.mark.parametrize("field", ["market_url", "aws_conn_id", "gcp_conn_id", "gcp_project"])
def test_a_non_text_name_is_a_config_error(field):
    with pytest.raises(SkyNomadConfigError, match=field):
        SkyNomadConfig.from_connection(_conn({field: 5}))


@pytest.mark.parametrize("field", ["speed", "probe_budget_usd_per_day"])
def test_a_boolean_number_is_a_config_error(field):
    with pytest.raises(SkyNomadConfigError, match=field):
        SkyNomadConfig.from_connection(_conn({field: True}))

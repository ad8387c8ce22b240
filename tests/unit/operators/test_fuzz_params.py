"""Hostile operator arguments (hypothesis): a `SkyNomadInputError` naming the argument, or a job
that starts normally; never another exception, and a refused job launches and writes nothing."""

from __future__ import annotations

import math
import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import TaskDeferred
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import JobParams, validate_params

from .test_operator import FakeStore, cloud, context_for, make_op, market_rows, now  # noqa: F401

EXAMPLES = int(os.environ.get("SKYNOMAD_FUZZ_EXAMPLES", "60"))
INJECTION = "'; DROP TABLE market_observations; --"
NUMBERS = st.sampled_from(
    [
        float("nan"), float("inf"), float("-inf"), -1, 0, -0.0, 1e308, 10**400, True, None, "abc", "", "6", " 2.5 ",
        [], {}, "nan", "inf", 2.5, 1, 1e-9,
    ]
) | st.floats() | st.integers()  # fmt: skip
TEXTS = st.sampled_from(["", " ", INJECTION, "a\x00b", "tab\tbed", "ok", 5, None, True, [], {}, b"bytes"]) | st.text(
    max_size=10
)
KEYS = st.sampled_from(["", " ", "A", "A=B", "k\x00", 5, None, True, INJECTION]) | st.text(max_size=8)
NAME_LISTS = st.sampled_from([None, "us-central1-a", 5, {}, [], [""], [None], [1], [["x"]], [INJECTION]]) | st.lists(
    TEXTS, max_size=3
)
HOSTILE = {
    "work_hours": NUMBERS,
    "cold_start_hours": NUMBERS,
    "checkpoint_gb": NUMBERS,
    "decision_step_minutes": NUMBERS,
    "market_lookback_hours": NUMBERS,
    "max_wall_seconds_per_step": NUMBERS,
    "instances": NUMBERS,
    "status_every_steps": NUMBERS,
    "command": st.sampled_from(["python train.py", [], ["a\x00b"], [None], 5, {"a": 1}, [["nested"]], ("true",)])
    | st.lists(TEXTS, max_size=3),
    "env": st.sampled_from([[], "A=B", {"A": None}, {"": "x"}, {"A=B": "c"}, {"A": "x\x00"}, {1: 2}, {"B": "x" * 9**5}])
    | st.dictionaries(KEYS, TEXTS, max_size=3),
    "tags": st.sampled_from([[], "x", {"k": None}, {"k\x00": "v"}, {"k": INJECTION}]) | st.dictionaries(KEYS, TEXTS),
    "zones": NAME_LISTS,
    "regions": NAME_LISTS,
    "clouds": NAME_LISTS,
    "instance_types": st.sampled_from([5, "", [""], {"gcp": 5}, {"gcp": [""]}, [None], INJECTION, {5: ["x"]}])
    | NAME_LISTS,
    "accelerator": TEXTS,
    "policy": TEXTS | st.sampled_from(["nope", "skynomad"]),
    "policy_params": st.sampled_from([[], "x", {"unknown": 1}, {1: 2}, 5]),
    "max_market_age": st.sampled_from(
        [None, -timedelta(hours=1), timedelta(0), 5, "2h", timedelta(days=10**5), float("nan")]
    ),
    "on_deadline_miss": st.sampled_from(["ignore", None, ["fail"], 5, "", "FAIL"]),
    "checkpoint_interval_hours": NUMBERS,
    "final_checkpoint_on_notice": st.sampled_from([None, 0, 1, "yes", "False", [], float("nan")]),
}
DEFAULTS = {
    "work_hours": 6.0,
    "cold_start_hours": 0.2,
    "checkpoint_gb": 50.0,
    "decision_step_minutes": 10.0,
    "market_lookback_hours": 72.0,
    "max_wall_seconds_per_step": None,
    "instances": 1,
    "status_every_steps": 6,
    "command": None,
    "env": {},
    "tags": {},
    "zones": None,
    "regions": None,
    "clouds": None,
    "instance_types": None,
    "accelerator": None,
    "policy": "skynomad",
    "policy_params": {},
    "max_market_age": timedelta(hours=2),
    "on_deadline_miss": "fail",
    "checkpoint_interval_hours": 0.0,
    "final_checkpoint_on_notice": False,
}


@st.composite
def hostile_arguments(draw) -> dict:
    names = draw(st.lists(st.sampled_from(sorted(HOSTILE)), min_size=1, max_size=3, unique=True))
    return {name: draw(HOSTILE[name]) for name in names}


def _sane(params: JobParams) -> None:
    for value in (
        params.work_hours,
        params.cold_start_hours,
        params.checkpoint_gb,
        params.decision_step_minutes,
        params.checkpoint_interval_hours,
    ):
        assert isinstance(value, float) and math.isfinite(value) and value >= 0
    assert params.work_hours > 0 and params.market_lookback_hours > 0
    assert type(params.instances) is int and params.instances >= 1
    assert all(isinstance(k, str) and isinstance(v, str) and "\x00" not in k + v for k, v in params.env.items())
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.tags.items())
    assert all(isinstance(p, str) and "\x00" not in p for p in params.command)
    for names in (params.zones, params.regions, params.clouds):
        assert names is None or all(isinstance(n, str) and n for n in names)
    assert isinstance(params.max_market_age, timedelta) and params.max_market_age > timedelta(0)
    assert params.on_deadline_miss in ("fail", "warn") and type(params.status_every_steps) is int
    assert type(params.final_checkpoint_on_notice) is bool


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(hostile_arguments())
def test_validate_params_raises_only_input_errors(arguments):
    op = SimpleNamespace(**{**DEFAULTS, **arguments})
    try:
        params = validate_params(op)
    except SkyNomadInputError as exc:
        assert str(exc) and "Traceback" not in str(exc)
        return
    _sane(params)


@settings(
    max_examples=EXAMPLES // 3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(hostile_arguments())
def test_a_hostile_operator_fails_before_launching_or_writing_anything(cloud, arguments):  # noqa: F811
    arguments = {k: v for k, v in arguments.items() if k not in ("command", "env")}  # no workload runs here
    rows, launches = market_rows(), len(cloud.launches)
    store = FakeStore()
    try:
        make_op(**arguments).execute(context_for(store))
    except TaskDeferred:
        return  # odd but valid arguments: the job started as any other
    except SkyNomadInputError:
        pass
    assert len(cloud.launches) == launches and store.writes == 0 and market_rows() == rows


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"work_hours": float("nan")}, "work_hours"),
        ({"work_hours": 0}, "work_hours"),
        ({"cold_start_hours": -1}, "cold_start_hours"),
        ({"checkpoint_gb": float("inf")}, "checkpoint_gb"),
        ({"status_every_steps": True}, "status_every_steps"),
        ({"instances": 10**6}, "instances"),
        ({"zones": "us-central1-a"}, "zones must be a list"),
        ({"env": {"A": "x\x00"}}, "control character"),
        ({"env": ["A=B"]}, "env must be a dict"),
        ({"policy_params": ["x"]}, "policy_params"),
        ({"max_market_age": "2h"}, "max_market_age"),
        ({"instance_types": {"gcp": 5}}, "instance_types"),
    ],
)
def test_what_fuzzing_found_is_refused_naming_the_argument(arguments, match):
    with pytest.raises(SkyNomadInputError, match=match):
        validate_params(SimpleNamespace(**{**DEFAULTS, **arguments}))

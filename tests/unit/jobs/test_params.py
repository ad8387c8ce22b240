"""The operator's arguments as the job runtime takes them (jobs/params.py): typed, round-tripped through
the trigger's plain data, and a wrong one refused naming it. The hostile-argument fuzzing is in
tests/unit/operators/test_fuzz_params.py."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest

from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import MAX_HOURS, JobParams, validate_params
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_MARKET_AGE


def operator(**changes) -> SimpleNamespace:
    """The arguments a `SkyNomadOperator` holds after templating, as `validate_params` reads them."""
    arguments = dict(
        command=["python", "train.py"], instances=2, decision_step_minutes="10", market_lookback_hours=72,
        max_wall_seconds_per_step=None, env={"MY_SETTING": "1"}, on_deadline_miss="fail", status_every_steps=6,
        work_hours=6, cold_start_hours=0.2, checkpoint_gb=50, checkpoint_interval_hours=0.0,
        final_checkpoint_on_notice=False, policy="skynomad", policy_params={"alpha": 1}, max_market_age=None,
        accelerator=None, instance_types=None, zones=[" us-central1-a "], regions=None, clouds=None, tags=None,
        on_deadline_risk=None, fleet_aware=True,
    )  # fmt: skip
    return SimpleNamespace(**{**arguments, **changes})


def test_the_arguments_are_typed_and_a_templated_number_counts():
    params = validate_params(operator())
    assert params.command == ("python", "train.py") and params.decision_step_minutes == 10.0
    assert params.step_hours == pytest.approx(10.0 / 60.0)
    assert params.zones == ["us-central1-a"] and params.tags == {} and params.env == {"MY_SETTING": "1"}
    assert params.max_market_age == DEFAULT_MAX_MARKET_AGE  # None: the 2 h default without a probe schedule


def test_max_market_age_none_takes_the_probe_schedules_age_when_one_is_given():
    params = validate_params(operator(), default_max_market_age=timedelta(hours=10))
    assert params.max_market_age == timedelta(hours=10)


def test_the_params_cross_the_trigger_as_plain_json_and_come_back_equal():
    params = validate_params(operator(max_market_age=timedelta(minutes=90)))
    data = json.loads(json.dumps(params.to_dict()))
    assert data["max_market_age"] == 5400.0 and data["command"] == ["python", "train.py"]
    assert JobParams.from_dict(data) == params


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"command": "python train.py"}, "command must be a list of arguments"),
        ({"command": []}, "command is empty"),
        ({"instances": True}, "instances must be a whole number"),
        ({"work_hours": 0}, "work_hours must be a finite number above 0"),
        ({"work_hours": MAX_HOURS + 1}, "work_hours"),
        ({"decision_step_minutes": "soon"}, "decision_step_minutes must be a number"),
        ({"env": {"1BAD": "x"}}, "is not a shell variable name"),
        ({"on_deadline_miss": "ignore"}, "on_deadline_miss"),
        ({"status_every_steps": 0}, "status_every_steps"),
        ({"policy": " "}, "policy must be a policy's name"),
        ({"max_market_age": timedelta(0)}, "max_market_age must be a positive timedelta"),
        ({"zones": "us-central1-a"}, "zones must be a list of names"),
        ({"zones": ["us-central1-a", " "]}, "zones holds an empty name"),
        ({"tags": {"k": "a\x00b"}}, "control character"),
        ({"instance_types": {"gcp": []}}, "instance_types must be a name"),
        ({"fleet_aware": "false"}, "fleet_aware must be True or False"),
        ({"final_checkpoint_on_notice": 1}, "final_checkpoint_on_notice"),
    ],
)
def test_a_wrong_argument_is_refused_naming_it(changes, named):
    with pytest.raises(SkyNomadInputError, match=named):
        validate_params(operator(**changes))


def test_a_command_or_env_value_may_span_lines_but_a_name_may_not():
    params = validate_params(operator(command=["bash", "-c", "set -e\npython train.py"], env={"A": "x\ny"}))
    assert params.command[-1] == "set -e\npython train.py" and params.env == {"A": "x\ny"}
    with pytest.raises(SkyNomadInputError, match="control character"):
        validate_params(operator(zones=["us-central1-a\n"]))

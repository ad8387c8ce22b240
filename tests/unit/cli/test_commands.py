"""The `skynomad` command's dispatch: every subcommand listed, and a command loads only its own module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_provider_skynomad.cli import COMMANDS, main


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS), out


def test_an_unknown_subcommand_is_a_usage_error_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["evalute"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'evalute'" in err and all(name in err for name in COMMANDS), err


LOADED = """
import json, sys
from airflow_provider_skynomad.cli import build_parser
build_parser(sys.argv[1:]).parse_args(sys.argv[1:])
print(json.dumps(sorted(m for m in ("sklearn", "airflow", "airflow_provider_skynomad.simulation") if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("argv", "heavy"),
    [
        (["market", "import", "--trace", "t.csv"], []),
        (["cleanup", "--dry-run"], []),
        (["prices", "show"], []),
        (["evaluate", "--trace", "t.csv", "--work-hours", "1", "--deadline-hours", "2"], ["sklearn"]),
    ],
)
def test_a_command_loads_only_what_it_needs(argv, heavy):
    """A fresh interpreter: `skynomad market import` must not pay for scikit-learn or Airflow."""
    done = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(heavy) <= set(loaded), loaded
    assert "airflow" not in loaded, loaded
    if not heavy:
        assert loaded == [], loaded

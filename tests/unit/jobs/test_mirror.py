"""The job runtime's tests mirror its source: every module of ``jobs/`` has ``tests/unit/jobs/test_<module>.py``.

A newcomer changing ``jobs/<module>.py`` finds its tests by name. Tests whose subject spans modules
(a job driven end to end) may sit beside them under their own names.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[2] / "airflow_provider_skynomad" / "jobs"


def untested(source: Path, tests: Path) -> list[str]:
    """The modules of `source` (its ``__init__`` aside) with no ``test_<module>.py`` in `tests`."""
    modules = sorted(path.stem for path in source.glob("*.py") if path.stem != "__init__")
    return [module for module in modules if not (tests / f"test_{module}.py").is_file()]


def test_every_jobs_module_has_a_test_module_of_its_name():
    assert SOURCE.is_dir() and any(SOURCE.glob("*.py"))
    missing = untested(SOURCE, HERE)
    assert missing == [], f"jobs/ modules without tests/unit/jobs/test_<module>.py: {missing}"


def test_the_mirror_check_sees_a_module_without_tests(tmp_path):
    source, tests = tmp_path / "jobs", tmp_path / "tests"
    source.mkdir(), tests.mkdir()
    for name in ("__init__.py", "clock.py", "fresh.py"):
        (source / name).write_text("")
    (tests / "test_clock.py").write_text("")
    assert untested(source, tests) == ["fresh"]

"""The `airflow standalone` recipes in README.md, docs/airflow.md and docs/getting-started.md work when pasted
as written.

`airflow standalone` starts its scheduler, dag-processor, api-server and triggerer as `airflow`
from PATH, so `.venv/bin/airflow standalone` alone fails each of them with FileNotFoundError.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def standalone_blocks(text: str) -> list[list[str]]:
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    return [b.splitlines() for b in blocks if re.search(r"^\S*airflow standalone\b", b, flags=re.M)]


@pytest.mark.parametrize("doc", ["README.md", "docs/airflow.md", "docs/getting-started.md"])
def test_the_standalone_recipe_puts_the_venv_on_path_first(doc):
    blocks = standalone_blocks((ROOT / doc).read_text())
    assert blocks, f"{doc} has no airflow standalone recipe"
    for lines in blocks:
        start = next(i for i, line in enumerate(lines) if re.match(r"\S*airflow standalone\b", line))
        before = lines[:start]
        assert any(re.match(r"export PATH=\S*\.venv/bin:\$PATH", line) for line in before), lines

"""Makes the shared synthetic-market helpers (tests/unit/planner/skynomad_synth.py) importable here
(under any --import-mode; pyproject uses importlib)."""

import sys
from pathlib import Path

_PLANNER_TESTS = str(Path(__file__).resolve().parents[1] / "planner")
if _PLANNER_TESTS not in sys.path:
    sys.path.insert(0, _PLANNER_TESTS)

"""Makes tests/unit/planner/skynomad_synth.py importable under any --import-mode (pyproject uses importlib)."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

"""A light stand-in for the bundled training loop: paced steps, one checkpoint and progress file per step.

Scale runs start hundreds of groups on a 2-core box; the bundled loop imports scikit-learn in every
group (about a second of CPU each), this one imports nothing beyond the standard library. It keeps
the workload protocol of docs/agent.md: write the step's checkpoint, then replace the progress file;
resume from the step the restored progress file names; exit on SIGTERM.

Usage: ``python light_workload.py WORK_HOURS [STEPS]`` (pace from ``SKYNOMAD_SIM_SPEED``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    work_hours = float(argv[0])
    steps = int(argv[1]) if len(argv) > 1 else 20
    speed = float(os.environ.get("SKYNOMAD_SIM_SPEED", "1"))
    checkpoint = Path(os.environ["SKYNOMAD_CHECKPOINT_DIR"])
    progress = Path(os.environ.get("SKYNOMAD_PROGRESS_FILE") or checkpoint / "progress.json")
    start = float(os.environ.get("SKYNOMAD_WORKLOAD_START_WALL") or time.time())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    checkpoint.mkdir(parents=True, exist_ok=True)
    done = int(json.loads(progress.read_text())["step"]) if progress.exists() else 0
    wall_per_step = work_hours * 3600.0 / speed / steps
    for step in range(done + 1, steps + 1):
        time.sleep(max(0.0, start + (step - done) * wall_per_step - time.time()))
        folder = checkpoint / f"step-{step}"
        folder.mkdir(exist_ok=True)
        (folder / "state").write_text(f"{step}\n")
        temporary = progress.with_name(".progress.tmp")
        temporary.write_text(json.dumps({"step": step, "total_steps": steps}))
        os.replace(temporary, progress)
        shutil.rmtree(checkpoint / f"step-{step - 1}", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

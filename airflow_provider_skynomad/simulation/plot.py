"""`--plot`: cost per policy per window, the optimum marked, as a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_costs(report: dict, path: str | Path) -> None:
    windows = report["windows"]
    names = [n for n in windows[0]["results"] if n != "optimal" and not n.startswith("uniform-progress[")]
    best_up = report["summary"].get("uniform-progress-best", {}).get("zone")
    if best_up:
        names.append(f"uniform-progress[{best_up}]")
    x = np.arange(len(windows))
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(windows)), 4.5))
    for j, name in enumerate(names):
        costs = [w["results"][name]["cost_usd"] for w in windows]
        ax.bar(x + (j - (len(names) - 1) / 2) * width, costs, width, label=name)
    if "optimal" in windows[0]["results"]:
        ax.scatter(
            x,
            [w["results"]["optimal"]["cost_usd"] for w in windows],
            marker="_",
            s=600,
            c="k",
            zorder=3,
            label="optimal",
        )
    ax.set_xticks(x, [w["start"][:16].replace("T", "\n") for w in windows], fontsize=7)
    ax.set_ylabel("cost (USD)")
    ax.set_title(f"Cost per window — {report['trace']['path']}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

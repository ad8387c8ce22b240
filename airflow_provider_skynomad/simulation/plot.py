"""`--plot`: cost ÷ optimum per policy per window, and each policy's mean, as an image.

Left: one group of bars per window, each bar a policy's cost divided by that window's optimum
(1.0 = optimal; the raw cost in USD when the report has no optimum). A policy far above the rest
(on-demand usually is) would squash every other bar, so the axis stops a little above the others
and such bars are cut there, their value written on top. A missed deadline is hatched. Right: the
per-policy mean ratio over all windows. The legend sits outside the plots.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

OFF_SCALE = 1.6  # a bar more than this times the tallest of the others is cut at the axis top


def plot_costs(report: dict, path: str | Path) -> None:
    # Windows whose real work cannot meet the deadline even all on-demand (--actual-work-ratio) are left out.
    windows = [w for w in report["windows"] if w.get("feasible", True)]
    if not windows:
        raise ValueError("no window can meet its deadline at the actual work ratio: nothing to plot")
    names = [n for n in windows[0]["results"] if n != "optimal" and not n.startswith("uniform-progress[")]
    best_up = report["summary"].get("uniform-progress-best", {}).get("zone")
    if best_up:
        names.append(f"uniform-progress[{best_up}]")
    has_optimum = "optimal" in windows[0]["results"] and all(w["results"]["optimal"]["cost_usd"] > 0 for w in windows)
    values = np.array(
        [
            [
                w["results"][n]["cost_usd"] / (w["results"]["optimal"]["cost_usd"] if has_optimum else 1.0)
                for w in windows
            ]
            for n in names
        ]
    )
    missed = np.array([[not w["results"][n].get("met_deadline", True) for w in windows] for n in names])
    top = _axis_top(values)

    fig, (ax, mean_ax) = plt.subplots(
        1, 2, figsize=(max(7.0, 0.9 * len(windows) + 4.5), 4.8), gridspec_kw={"width_ratios": [max(3, len(windows)), 2]}
    )
    x = np.arange(len(windows))
    width = 0.8 / max(1, len(names))
    colours = plt.get_cmap("tab10").colors
    cut = []
    for j, name in enumerate(names):
        shown = np.minimum(values[j], top)
        offsets = x + (j - (len(names) - 1) / 2) * width
        bars = ax.bar(offsets, shown, width, label=name, color=colours[j % len(colours)])
        for bar, miss in zip(bars, missed[j], strict=True):
            if miss:
                bar.set_hatch("///")
                bar.set_edgecolor("black")
        for k in np.flatnonzero(values[j] > top):
            ax.text(offsets[k], top, f"{values[j][k]:.1f}", ha="center", va="bottom", fontsize=7)
            cut.append(name)
    if has_optimum:
        ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(x, [w["start"][:16].replace("T", "\n") for w in windows], fontsize=7)
    ax.set_ylabel("cost ÷ optimum (1 = optimal)" if has_optimum else "cost (USD)")
    ax.set_title(f"Per window — {Path(str(report['trace']['path'])).name}", fontsize=9)
    notes = []
    if cut:
        notes.append(f"{', '.join(sorted(set(cut)))}: off the scale, cut at the top (value written on the bar)")
    if missed.any():
        notes.append("hatched: deadline missed")
    if notes:
        ax.text(0, -0.2, "; ".join(notes), transform=ax.transAxes, fontsize=7, va="top")

    means = values.mean(axis=1)
    mean_ax.barh(
        np.arange(len(names)), np.minimum(means, top), color=[colours[j % len(colours)] for j in range(len(names))]
    )
    for j, mean in enumerate(means):
        mean_ax.text(min(mean, top), j, f" {mean:.2f}", va="center", fontsize=7)
    if has_optimum:
        mean_ax.axvline(1.0, color="black", linewidth=0.8)
    mean_ax.set_yticks(np.arange(len(names)), names, fontsize=7)
    mean_ax.invert_yaxis()
    mean_ax.set_xlim(0, top * 1.25)
    mean_ax.set_title("Mean over windows", fontsize=9)
    fig.legend(
        *ax.get_legend_handles_labels(),
        loc="upper center",
        ncol=min(len(names), 4),
        fontsize=7,
        bbox_to_anchor=(0.5, 1.0),
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.03, 1, 0.92))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _axis_top(values: np.ndarray) -> float:
    """The axis top: the tallest bar, unless one policy towers over the rest (then a little above the rest)."""
    per_policy = values.max(axis=1)
    if len(per_policy) < 2:
        return float(per_policy.max()) if per_policy.size else 1.0
    ordered = np.sort(per_policy)
    rest = ordered[-2]
    return float(ordered[-1] if ordered[-1] <= OFF_SCALE * rest else rest * 1.15)

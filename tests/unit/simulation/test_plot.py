"""`skynomad evaluate --plot`: cost ÷ optimum, on-demand off the scale noted rather than squashing the rest."""

from __future__ import annotations

import numpy as np

from airflow_provider_skynomad.simulation.plot import _axis_top, plot_costs


def report(windows: int = 4) -> dict:
    def result(cost, met=True):
        return {"cost_usd": cost, "met_deadline": met}

    return {
        "trace": {"path": "/somewhere/trace.csv.gz"},
        "summary": {},
        "windows": [
            {
                "start": f"2025-10-0{4 + k}T00:00:00Z",
                "results": {
                    "skynomad": result(11.0 + k),
                    "eager-failover": result(13.0, met=k != 2),
                    "on-demand": result(60.0),
                    "optimal": result(10.0 + k),
                },
            }
            for k in range(windows)
        ],
    }


def test_a_towering_policy_is_cut_so_the_others_stay_readable():
    ratios = np.array([[1.1, 1.2], [1.3, 1.25], [6.0, 5.5]])
    assert _axis_top(ratios) < 2.0  # on-demand's 6× does not set the scale
    assert _axis_top(np.array([[1.1], [1.3]])) == 1.3  # nothing towers: the tallest bar is the top


def test_the_plot_is_written(tmp_path):
    path = tmp_path / "costs.png"
    plot_costs(report(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    plot_costs(
        {
            **report(),
            "windows": [
                {**w, "results": {k: v for k, v in w["results"].items() if k != "optimal"}} for w in report()["windows"]
            ],
        },
        tmp_path / "raw.svg",
    )
    assert "cost (USD)" in (tmp_path / "raw.svg").read_text()

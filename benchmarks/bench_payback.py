"""The payback rule (planner/payback.py) on single jobs: bench_robustness's job shapes and bench_policies' cost rows.

    .venv/bin/python benchmarks/bench_payback.py      # 57 rows, skynomad with and without the rule, eager-failover

Per row (same traces, ratios and windows as bench_robustness.py's main table and bench_policies.py
--only cost), the mean cost of skynomad as it plans (payback on), of skynomad with `payback=False`
(the planner without the rule, which is exactly what it did before it), and of eager-failover; a
▲ marks a row where skynomad costs more than eager-failover. The optimum is the same for both
skynomad runs, so comparing their means is comparing their ratios to it.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ProcessPoolExecutor

from bench_policies import RATIOS, TRACES, evaluate
from bench_robustness import RATIOS as SHAPE_RATIOS
from bench_robustness import SHAPES

from airflow_provider_skynomad.simulation.evaluate import OptimumGapWarning


def _evaluate(args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimumGapWarning)
        return evaluate(args)


def rows() -> list[tuple[str, str, str, float, int | None, dict]]:
    """(table, job shape, trace, T/P, windows, shape) of every row."""
    out = [
        ("robustness", name, label, ratio, 10, shape)
        for name, shape in SHAPES.items()
        for label in TRACES
        for ratio in SHAPE_RATIOS
    ]
    return out + [("policies", "cost table", label, ratio, None, {}) for label in TRACES for ratio in RATIOS]


def main() -> None:
    table = rows()
    tasks = []
    for _, _, label, ratio, windows, shape in table:
        tasks.append((label, ratio, windows, ("skynomad", "eager-failover"), {"skynomad": {"payback": True}}, shape))
        tasks.append((label, ratio, windows, ("skynomad",), {"skynomad": {"payback": False}}, shape))
    above_on = above_off = dearer = 0
    with ProcessPoolExecutor(max_workers=2) as pool:
        out = pool.map(_evaluate, tasks)
        for name, shape_name, label, ratio, _, _ in table:
            on, off = next(out)[2], next(out)[2]
            sky, without = on["skynomad"]["mean_cost_usd"], off["skynomad"]["mean_cost_usd"]
            eager = on["eager-failover"]["mean_cost_usd"]
            misses = on["skynomad"]["misses"] + off["skynomad"]["misses"] + on["eager-failover"]["misses"]
            above_on += sky > eager + 1e-9
            above_off += without > eager + 1e-9
            dearer += sky > without + 1e-9
            flag = (" ▲" if sky > eager + 1e-9 else "") + (" ▲ without" if without > eager + 1e-9 else "")
            print(
                f"{name}: {shape_name} | {label} | T/P {ratio} | skynomad ${sky:.2f} (without payback ${without:.2f}, "
                f"{sky / without - 1:+.1%}) | eager ${eager:.2f} | misses {misses}{flag}",
                flush=True,
            )
    print(
        f"rows above eager-failover: {above_on} with payback, {above_off} without; "
        f"rows where payback costs more: {dearer}"
    )


if __name__ == "__main__":
    main()

"""The market table at scale: each decision's read, import/export of 10⁶ rows, a probe round's writes.

The table holds 200 markets (zones of one instance type, in 50 regions of two clouds) probed every
10 minutes for 30 days: 864,000 rows. On PostgreSQL (127.0.0.1:5432, database ``test``, a schema
of its own, dropped at the end) and on a SQLite file, prints:

- **decision reads**: what `MarketSource` does per trigger step, an incremental read of the rows
  since the newest one held minus the 1 h overlap, as p50/p99 over every step of several jobs
  (each job runs 24 h of 10-minute steps), CPU and wall apart; beside it the same step with the
  planner's view rebuilt (read + grid), which is what a decision pays;
- **start reads**: the first read of a job, `select_markets` (the start-of-job check over the
  lookback window) plus the job's first full-window read (72 h lookback), p50/p99 over job starts;
  for a job on 8 markets (two regions) and on all 200;
- **import / export**: `skynomad market import` and `export` of a 10⁶-row trace, each in its own
  process (wall seconds and that process's peak RSS), into an empty table;
- **probe round**: rows per second a probe round writes, when it appends one row per market (200
  rows in one append) and when each region's probe task appends its own 4 rows;
- **compaction**: `skynomad market compact` of the 864k-row table keeping 7 days at full resolution.

Run: ``nice -n 10 python benchmarks/bench_market.py`` (a few minutes on 2 cores).
Options: ``--skip-postgres``, ``--skip-sqlite``, ``--skip-import``, ``--only-import``, ``--jobs N``,
``--reads-on URL`` (the decision reads alone, on a table already holding these rows),
``--only-migration`` (opening a 10⁶-row table of the previous layout, schema 3, which migrates it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_provider_skynomad.market.observations import COLUMNS  # noqa: E402
from airflow_provider_skynomad.market.source import MarketSource, select_markets  # noqa: E402
from airflow_provider_skynomad.market.store.table import MarketTable  # noqa: E402

MARKETS = 200
ZONES_PER_REGION = 4
STEP = pd.Timedelta(minutes=10)
DAYS = 30
START = pd.Timestamp("2026-01-01T00:00:00Z")
LOOKBACK_HOURS = 72.0
JOB_HOURS = 24
IMPORT_ROWS = 1_000_000
_DRIVER = "psycopg2" if importlib.util.find_spec("psycopg2") else "psycopg"


def market_frame(markets: int = MARKETS, steps: int = DAYS * 24 * 6, start: pd.Timestamp = START) -> pd.DataFrame:
    """markets × steps rows, sorted by time: availability a sticky random walk, prices stepping now and then."""
    rng = np.random.default_rng(16)
    times = start + STEP * np.arange(steps)
    zone_ids = np.arange(markets)
    regions = zone_ids // ZONES_PER_REGION
    cloud = np.where(regions % 2 == 0, "gcp", "aws")
    region = np.array([f"region{r:02d}" for r in regions])
    zone = np.array([f"region{r:02d}-{'abcd'[z % ZONES_PER_REGION]}" for z, r in zip(zone_ids, regions, strict=True)])
    change = rng.random((steps, markets)) < 0.1
    available = np.where(change, rng.integers(0, 17, (steps, markets)), -1)
    available[0] = 16
    for k in range(1, steps):  # forward-fill the unchanged steps
        keep = available[k] < 0
        available[k, keep] = available[k - 1, keep]
    base = 1.5 + (zone_ids % 7) * 0.25
    steps_up = np.cumsum(rng.random((steps, markets)) < 0.01, axis=0)
    spot = np.round(base * (1 + 0.02 * (steps_up % 5)), 4)
    return pd.DataFrame(
        {
            "observed_at": np.repeat(times, markets),
            "cloud": np.tile(cloud, steps),
            "region": np.tile(region, steps),
            "zone": np.tile(zone, steps),
            "instance_type": "a3-highgpu-1g",
            "accelerator": "H100",
            "accelerator_count": 1,
            "requested": 16,
            "available": available.reshape(-1),
            "spot_price": spot.reshape(-1),
            "on_demand_price": np.tile(base * 5, steps),
        }
    )[COLUMNS]


def _postgres_url(schema: str) -> str | None:
    from sqlalchemy import create_engine, make_url

    base = os.environ.get("SKYNOMAD_TEST_POSTGRES_URL") or f"postgresql+{_DRIVER}://postgres@127.0.0.1:5432/test"
    url = make_url(base)
    try:
        engine = create_engine(url, connect_args={"connect_timeout": 5})
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - reported, the SQLite half still runs
        print(f"PostgreSQL unreachable ({exc.__class__.__name__}); skipping it", file=sys.stderr)
        return None
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)


def _drop_schema(schema: str) -> None:
    from sqlalchemy import create_engine

    engine = create_engine(f"postgresql+{_DRIVER}://postgres@127.0.0.1:5432/test")
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    engine.dispose()


def _server_cpu_seconds(pid: int | None) -> float:
    """CPU seconds a local PostgreSQL backend has used (from /proc; 0 when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0


def _fill(url: str, frame: pd.DataFrame) -> tuple[float, float, float]:
    """Wall seconds, this process's CPU seconds and the PostgreSQL backend's CPU seconds of the fill."""
    with MarketTable(url) as table:
        table.create()
        pid = None
        if table.dialect == "postgresql":  # one connection in the pool: the fill runs on this backend
            with table.engine.connect() as conn:
                pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        server = _server_cpu_seconds(pid)
        began, cpu = time.perf_counter(), time.process_time()
        chunks = (frame.iloc[i : i + 100_000] for i in range(0, len(frame), 100_000))
        table.append_chunks(chunks)
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        server = _server_cpu_seconds(pid) - server
        if table.dialect == "postgresql":
            with table.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE market_observations")
    return elapsed, cpu, server


def _ms(values: list[float]) -> str:
    a = np.asarray(values) * 1000
    p50, p99 = np.percentile(a, 50), np.percentile(a, 99)
    return f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  max {a.max():6.2f} ms  (n={len(a)})"


def decision_reads(url: str, frame: pd.DataFrame, jobs: int) -> dict:
    """Per job: the start reads, then JOB_HOURS of 10-minute steps, each an incremental read (and a view)."""
    end = frame["observed_at"].max()
    first = frame["observed_at"].min() + pd.Timedelta(hours=LOOKBACK_HOURS + 1)
    starts = pd.date_range(first, end - pd.Timedelta(hours=JOB_HOURS), periods=jobs)
    out = {
        size: {"start": [], "step": [], "step_cpu": [], "view": [], "view_cpu": [], "start_cpu": []}
        for size in ("8 markets", "200 markets")
    }
    with MarketTable(url) as table:
        table.create()
        table.read(zones=["region00-a"], since=end - pd.Timedelta(hours=1))  # warm the pool
        for name, regions in (("8 markets", ["region10", "region11"]), ("200 markets", None)):
            for start in starts:
                start = start.floor("10min") + pd.Timedelta(minutes=3)
                began, cpu = time.perf_counter(), time.process_time()
                selection, _ = select_markets(
                    table,
                    start,
                    zones=None,
                    regions=regions,
                    clouds=None,
                    instance_types=None,
                    accelerator="H100",
                    lookback_hours=LOOKBACK_HOURS,
                    max_market_age=timedelta(hours=2),
                    where="bench",
                )
                source = MarketSource(
                    table,
                    selection.zones,
                    selection.instance_types,
                    start - pd.Timedelta(hours=LOOKBACK_HOURS),
                    step_hours=1 / 6,
                    gang_size=1,
                )
                source.frame(start + pd.Timedelta(seconds=1))
                out[name]["start"].append(time.perf_counter() - began)
                out[name]["start_cpu"].append(time.process_time() - cpu)
                for k in range(1, JOB_HOURS * 6 + 1):
                    now = start + STEP * k + pd.Timedelta(seconds=1)
                    began, cpu = time.perf_counter(), time.process_time()
                    source.frame(now)
                    out[name]["step"].append(time.perf_counter() - began)
                    out[name]["step_cpu"].append(time.process_time() - cpu)
                    began, cpu = time.perf_counter(), time.process_time()
                    source.view(now)  # the grid rebuilt from the rows just read
                    out[name]["view"].append(time.perf_counter() - began + out[name]["step"][-1])
                    out[name]["view_cpu"].append(time.process_time() - cpu + out[name]["step_cpu"][-1])
    return out


def probe_rounds(url: str, frame: pd.DataFrame, rounds: int = 20) -> dict:
    """Rows per second of a probe round: one 200-row append, and 50 per-region appends of 4 rows."""
    last = frame[frame["observed_at"] == frame["observed_at"].max()].reset_index(drop=True)
    whole, per_region = [], []
    with MarketTable(url) as table:
        table.create()
        for k in range(1, rounds + 1):
            rows = last.assign(observed_at=last["observed_at"] + STEP * k)
            began = time.perf_counter()
            table.append(rows, source="bench probe round")
            whole.append(time.perf_counter() - began)
        for k in range(rounds + 1, 2 * rounds + 1):
            rows = last.assign(observed_at=last["observed_at"] + STEP * k)
            began = time.perf_counter()
            for _, part in rows.groupby("region", sort=False):
                table.append(part, source="bench probe task")
            per_region.append(time.perf_counter() - began)
    n = len(last)
    return {"whole": n / np.median(whole), "per_region": n / np.median(per_region), "rows": n}


def compaction(url: str) -> dict:
    from airflow_provider_skynomad.market.store.retention import compact

    with MarketTable(url) as table:
        before = table.count()
        now = table.latest_observed_at()
        began = time.perf_counter()
        report = compact(table, keep_full_days=7, now=now)
        elapsed = time.perf_counter() - began
        after = table.count()
    return {"before": before, "after": after, "seconds": elapsed, "deleted": report.deleted}


# `skynomad market ...` through its own parser, as tests/unit/cli/test_market_commands.py does: the whole
# `skynomad` CLI also imports Airflow and every other subcommand (~650 MB before any work), which
# would hide what import and export themselves hold. `_cli_baseline_rss` gives that figure.
_MARKET_CLI = (
    "import argparse, sys; from airflow_provider_skynomad.cli.market import add_market_commands; "
    "p = argparse.ArgumentParser(prog='skynomad'); add_market_commands(p.add_subparsers(dest='command')); "
    "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
)


SERVER_CPU: dict[str, float] = {}
"""PostgreSQL backend CPU seconds of the last measured command, by command (see `_backend_pids`)."""


def _backend_pids(app: str) -> list[int]:
    """PIDs of the PostgreSQL backends serving connections named `app` (application_name)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"postgresql+{_DRIVER}://postgres@127.0.0.1:5432/test")
    try:
        with engine.connect() as conn:
            query = text("SELECT pid FROM pg_stat_activity WHERE application_name = :app")
            return list(conn.execute(query, {"app": app}).scalars())
    finally:
        engine.dispose()


def _measure(code: str, *argv: str, server_app: str | None = None) -> tuple[int, float, float, float, str]:
    """Exit code, wall seconds, peak RSS (MB) and CPU seconds of one command in its own process.

    Peak RSS is the child's own high-water mark (VmHWM, polled): the rusage of a child forked
    from this process starts from *this* process's peak, which the 864k-row frames make large.
    `server_app`: the application_name of the command's PostgreSQL connections, whose backends'
    CPU seconds (read from /proc while they live) go to `SERVER_CPU[server_app]`.
    """
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak_kb = 0
    backends: dict[int, float] = {}
    polls = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except OSError:
            pass
        if server_app and polls % 4 == 0:
            for backend in set(backends) | set(_backend_pids(server_app)):
                cpu = _server_cpu_seconds(backend)
                backends[backend] = max(backends.get(backend, 0.0), cpu)
        polls += 1
        time.sleep(0.05)
    if server_app:
        SERVER_CPU[server_app] = sum(backends.values())
    elapsed = time.perf_counter() - began
    out = proc.stdout.read().decode() + proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, elapsed, peak_kb / 1024, usage.ru_utime + usage.ru_stime, out.strip()


def _run_cli(*argv: str, server_app: str | None = None) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MB) of one `skynomad market` command in its own process."""
    SERVER_CPU.pop(server_app or "", None)
    code, elapsed, rss, cpu, out = _measure(_MARKET_CLI, *argv, server_app=server_app)
    if server_app in SERVER_CPU and SERVER_CPU[server_app]:
        return elapsed, rss, f"CPU {cpu:.1f} s here, {SERVER_CPU[server_app]:.1f} s in PostgreSQL; {out}"
    if code != 0:
        raise RuntimeError(f"skynomad {' '.join(argv)} exited {code}: {out}")
    return elapsed, rss, f"CPU {cpu:.1f} s; {out}"


def import_export(url: str, trace: Path, tmp: Path) -> dict:
    from sqlalchemy import make_url

    named = {}
    if url.startswith("postgresql"):
        named = {what: make_url(url).update_query_dict({"application_name": f"bench_{what}"}).render_as_string(
            hide_password=False) for what in ("import", "export")}  # fmt: skip
    seconds_in, rss_in, said_in = _run_cli(
        "market", "import", "--trace", str(trace), "--url", named.get("import", url), server_app="bench_import"
    )
    out = tmp / f"export-{uuid.uuid4().hex[:6]}.csv"
    seconds_out, rss_out, said_out = _run_cli(
        "market", "export", "--output", str(out), "--url", named.get("export", url), server_app="bench_export"
    )
    same = out.read_bytes() == trace.read_bytes()
    out.unlink()
    nothing = ("market", "export", "--output", str(out), "--url", url, "--since", "2100-01-01")
    baseline, whole = _run_cli_allow_fail(*nothing), _run_cli_allow_fail(*nothing, whole_cli=True)
    return {
        "import": (seconds_in, rss_in, said_in),
        "export": (seconds_out, rss_out, said_out),
        "round_trip_exact": same,
        "baseline_rss": baseline,
        "whole_cli_rss": whole,
    }


def migration(url: str, frame: pd.DataFrame) -> dict:
    """Seconds to open a schema-3 table of `frame`'s rows with this code (it migrates it on open)."""
    from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, PrimaryKeyConstraint, String, Table
    from sqlalchemy import create_engine as engine_for

    from airflow_provider_skynomad.market.store import bulk
    from airflow_provider_skynomad.market.store.database import INSERT, parse_url
    from airflow_provider_skynomad.market.store.table import market_observations

    meta = MetaData()  # schema 3 as that release created it
    old = Table(
        "market_observations",
        meta,
        *(Column(c.name, c.type, nullable=False) for c in market_observations.columns),
        PrimaryKeyConstraint("zone", "instance_type", "observed_at", name="pk_market_observations"),
        Index("ix_market_observations_zone_observed_at", "zone", "observed_at"),
        Index("ix_market_observations_observed_at", "observed_at", "zone", "instance_type"),
    )
    Table("market_changes", meta, Column("kind", String(32), primary_key=True), Column("count", BigInteger))
    versions = Table(
        "schema_version", meta, Column("component", String(64), primary_key=True), Column("version", Integer)
    )
    parsed = parse_url(url)
    engine = engine_for(parsed)
    meta.create_all(engine)
    dialect = parsed.get_backend_name()
    with engine.begin() as conn:
        conn.execute(versions.insert(), [{"component": "market", "version": 3}])
        for i in range(0, len(frame), 100_000):
            bulk.insert_rows(conn, old, dialect, frame.iloc[i : i + 100_000], INSERT[dialect])
    engine.dispose()
    began = time.perf_counter()
    with MarketTable(url) as table:
        table.create()
        seconds = time.perf_counter() - began
        rows = table.count()
    return {"seconds": seconds, "rows": rows}


def _run_cli_allow_fail(*argv: str, whole_cli: bool = False) -> float:
    """Peak RSS (MB) of a command that may fail; `whole_cli`: through `skynomad`'s own main."""
    code = "import sys; from airflow_provider_skynomad.cli import main; sys.exit(main(sys.argv[1:]))"
    return _measure(code if whole_cli else _MARKET_CLI, *argv)[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--skip-import", action="store_true")
    parser.add_argument("--only-import", action="store_true", help="skip the 864k-row table (fill, reads, compact)")
    parser.add_argument("--jobs", type=int, default=4, help="jobs per backend and job size (each 144 steps)")
    parser.add_argument(
        "--only-migration", action="store_true", help="only the migration of a 10⁶-row schema-3 table on open"
    )
    parser.add_argument(
        "--reads-on",
        action="append",
        default=[],
        metavar="URL",
        help="only the decision reads, on an existing table holding market_frame()'s rows (filled once with "
        "MarketTable(URL).append_chunks([market_frame()]), e.g. while tuning); repeatable",
    )
    args = parser.parse_args()
    if args.reads_on:
        frame = market_frame()
        for url in args.reads_on:
            print(f"\n== decision reads on {MarketTable(url).display_url} (load {os.getloadavg()[0]:.1f})")
            for size, figures in decision_reads(url, frame, args.jobs).items():
                print(f"  job on {size}:")
                for key, label in (("step", "read, wall"), ("step_cpu", "read, CPU"), ("view", "read+view, wall"),
                                   ("view_cpu", "read+view, CPU"), ("start", "start, wall"),
                                   ("start_cpu", "start, CPU")):  # fmt: skip
                    if figures[key]:
                        print(f"    {label:12s} {_ms(figures[key])}")
        return 0

    frame = market_frame()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times grow with it)")
    print(f"market table: {len(frame):,} rows, {MARKETS} markets, every {STEP.seconds // 60} min for {DAYS} days")
    schema = f"bench_market_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="bench_market_") as tmp_name:
        tmp = Path(tmp_name)
        backends = []
        if not args.skip_postgres and (url := _postgres_url(schema)):
            backends.append(("PostgreSQL", url))
        if not args.skip_sqlite:
            backends.append(("SQLite", f"sqlite:///{tmp / 'market.db'}"))
        try:
            if args.only_migration:
                big = market_frame(steps=IMPORT_ROWS // MARKETS, start=pd.Timestamp("2025-01-01T00:00:00Z"))
                for name, _ in backends:
                    url = _postgres_url(schema + "_io") if name == "PostgreSQL" else f"sqlite:///{tmp / 'old.db'}"
                    done = migration(url, big)
                    print(
                        f"  {name:10s} migration of a {done['rows']:,}-row schema-3 table on first open: "
                        f"{done['seconds']:.1f} s (load {os.getloadavg()[0]:.1f})"
                    )
                return 0
            for name, url in [] if args.only_import else backends:
                seconds, cpu, server = _fill(url, frame)
                rate = len(frame) / seconds
                print(
                    f"\n== {name}: filled {len(frame):,} rows in {seconds:.1f} s ({rate:,.0f} rows/s; CPU: "
                    f"{cpu:.1f} s here" + (f", {server:.1f} s in the PostgreSQL backend)" if server else ")")
                )
                print(f"  load average before the reads: {os.getloadavg()[0]:.1f}")
                reads = decision_reads(url, frame, args.jobs)
                for size, figures in reads.items():
                    print(f"  job on {size}:")
                    print(f"    decision read (incremental), wall  {_ms(figures['step'])}")
                    print(f"    decision read (incremental), CPU   {_ms(figures['step_cpu'])}")
                    print(f"    start read (select + window), wall {_ms(figures['start'])}")
                    print(f"    start read (select + window), CPU  {_ms(figures['start_cpu'])}")
                    print(f"    read + view rebuilt, wall          {_ms(figures['view'])}")
                    print(f"    read + view rebuilt, CPU           {_ms(figures['view_cpu'])}")
                probe = probe_rounds(url, frame)
                print(
                    f"  rows per second a probe round writes ({probe['rows']} markets): {probe['whole']:,.0f} in one "
                    f"append, {probe['per_region']:,.0f} as one append per region ({ZONES_PER_REGION} rows each, "
                    "in sequence)"
                )
                done = compaction(url)
                print(
                    f"  compact (keep 7 days full): {done['before']:,} → {done['after']:,} rows "
                    f"in {done['seconds']:.1f} s"
                )
                print(f"  load average now: {os.getloadavg()[0]:.1f}")
            if not args.skip_import:
                trace = tmp / "trace-1e6.csv"
                big = market_frame(steps=IMPORT_ROWS // MARKETS, start=pd.Timestamp("2025-01-01T00:00:00Z"))
                from airflow_provider_skynomad.market.observations import write_observations

                write_observations(big, trace)
                del big
                print(f"\n== import / export of {IMPORT_ROWS:,} rows ({trace.stat().st_size / 1e6:.0f} MB CSV)")
                for name, _ in backends:
                    url = _postgres_url(schema + "_io") if name == "PostgreSQL" else f"sqlite:///{tmp / 'import.db'}"
                    figures = import_export(url, trace, tmp)
                    for what in ("import", "export"):
                        seconds, rss, said = figures[what]
                        print(f"  {name:10s} {what}: {seconds:5.1f} s, peak RSS {rss:5.0f} MB ({said.split(';')[0]})")
                    print(f"  {name:10s} load average now: {os.getloadavg()[0]:.1f}")
                    print(
                        f"  {name:10s} (a process that exports nothing: {figures['baseline_rss']:.0f} MB, "
                        f"{figures['whole_cli_rss']:.0f} MB through the whole `skynomad` CLI); "
                        f"export == input file: {figures['round_trip_exact']}"
                    )
        finally:
            if any(name == "PostgreSQL" for name, _ in backends):
                _drop_schema(schema)
                _drop_schema(schema + "_io")
    return 0


if __name__ == "__main__":
    sys.exit(main())

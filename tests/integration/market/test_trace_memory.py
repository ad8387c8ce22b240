"""Reading a trace with a gigabyte line costs no gigabyte: the peak memory of a fresh interpreter
reading one (a 1 GiB line, streamed into a small gzip) stays close to one reading a good
trace. The line limit's errors: tests/unit/market/test_trace_lines.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.trace_files import HEADER, MIB, rows, write_gzip_with_long_line


def test_reading_a_gigabyte_line_costs_no_gigabyte(tmp_path):
    """Peak memory of a fresh interpreter reading it stays within 200 MiB of one reading a good trace."""
    bad = tmp_path / "long.csv.gz"
    write_gzip_with_long_line(bad, HEADER + rows(3), 1024 * MIB)
    good = tmp_path / "good.csv"
    good.write_text(HEADER + rows(3))
    probe = textwrap.dedent(
        """
        import resource, sys
        from airflow_provider_skynomad.market.observations import TraceError, iter_observations
        try:
            list(iter_observations(sys.argv[1]))
        except TraceError as exc:
            print("TraceError:", exc, file=sys.stderr)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        """
    )

    def peak_kib(path) -> int:
        done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    grown_mib = (peak_kib(bad) - peak_kib(good)) / 1024
    assert grown_mib < 200, f"reading a trace with a 1 GiB line grew memory by {grown_mib:.0f} MiB"

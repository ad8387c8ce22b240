"""Trace files for the line-limit tests: valid rows, and a gzip with one enormous line written in
streaming (a few hundred KiB on disk for a line of gigabytes). Shared by tests/unit/market/ and
tests/integration/market/."""

from __future__ import annotations

import gzip

from airflow_provider_skynomad.market.observations import COLUMNS

HEADER = ",".join(COLUMNS) + "\n"
ROW = "2025-10-04T00:{m:02d}:00Z,gcp,us-central1,us-central1-a,a3-highgpu-1g,H100,1,16,16,2.3724,10.3157\n"
MIB = 1 << 20


def rows(n: int) -> str:
    return "".join(ROW.format(m=i) for i in range(n))


def write_gzip_with_long_line(path, before: str, length: int) -> None:
    """`before`, then one line of `length` bytes, streamed: the test itself never holds it."""
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(before.encode())
        block = b"a" * MIB
        for _ in range(length // MIB):
            out.write(block)
        out.write(b"\n")

"""swauto's host GEMM against NumPy (OpenBLAS) side by side: medians, ratios, the machine and the date.

    python benchmarks/host_gemm.py [--sizes 256 512 1024] [--repeat 5]

Writes benchmarks/results/host_gemm.csv and .md. The first, unoptimised host backend: the fast
micro-kernel and threads are a later issue, so expect a small fraction of OpenBLAS here.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import swauto

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def median_seconds(function, repeat: int) -> float:
    function()  # warm up (JIT, caches, BLAS threads)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{datetime.datetime.now().isoformat(timespec='seconds')}  {platform.processor() or platform.machine()}  "
          f"{os.cpu_count()} cores  numpy {np.__version__}  (numpy threads as configured by OpenBLAS)")
    rows = []
    for size in args.sizes:
        params = {"M": size, "N": size, "K": size}
        kernel = swauto.compile(ROOT / "examples" / "gemm.sw", params, target="host")
        rng = np.random.default_rng(0)
        a = rng.standard_normal((size, size), dtype=np.float32)
        b = rng.standard_normal((size, size), dtype=np.float32)
        c = np.zeros((size, size), dtype=np.float32)
        flops = 2 * size**3
        ours = median_seconds(lambda a=a, b=b, c=c, kernel=kernel: kernel(A=a, B=b, C=c), args.repeat)
        theirs = median_seconds(lambda a=a, b=b, c=c: np.matmul(a, b, out=c), args.repeat)
        row = {
            "size": size,
            "candidate": kernel.schedule.id,
            "swauto_gflops": round(flops / ours / 1e9, 2),
            "numpy_gflops": round(flops / theirs / 1e9, 2),
            "ratio": round(theirs / ours, 3),
        }
        rows.append(row)
        print(f"{size:5d}^3  swauto {row['swauto_gflops']:7.2f} GFLOPS  numpy {row['numpy_gflops']:7.2f} GFLOPS  "
              f"swauto/numpy {row['ratio']:.3f}  ({kernel.schedule.describe()})")
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "host_gemm.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| size | swauto GFLOPS | NumPy GFLOPS | swauto / NumPy |", "|---|---|---|---|"]
    lines += [f"| {r['size']}³ | {r['swauto_gflops']} | {r['numpy_gflops']} | {r['ratio']} |" for r in rows]
    (RESULTS / "host_gemm.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

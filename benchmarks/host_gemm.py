"""swauto's host GEMM against numpy.matmul (OpenBLAS) and torch.matmul (when installed), side by side.

    python benchmarks/host_gemm.py [--shapes 1024 2048x64x64 ...] [--threads 1 2] [--repeat 5] [--tuner model]
                                   [--name host_gemm]

A shape is `S` (S x S x S) or `MxNxK`; the operator is examples/gemm.sw computing C = A B (as the peers
do; the example adds into C) with tile sizes from 32 to 1024 (2048 for K).
For each shape and thread count (the most threads each implementation may use: OpenBLAS and PyTorch run
small GEMMs on fewer, swauto on one where its model predicts the call too small to share;
`swauto_threads` says which): the median of `--repeat` calls of each implementation (taking turns; on two
threads each turn first calls its function for 0.2 s, so OpenBLAS's spinning idle threads do not slow
the next: `common.turn_seconds`), GFLOPS
and the ratios to swauto, the FMA peak of the cores in those same turns (`host_model.peak_probe`: on a
shared machine the peak a calibration measured once may not be what the cores give during the run) and
swauto's percent of it (the ratios and the percent are medians of each turn's own: `common.paired_ratio`),
the tuning time and the compile time. A run whose probe read well below the peak calibration measured
on that many cores (another tenant held a core) is run again (`common.probed_run`; `runs` says how many
it took). The libraries' thread counts are set with threadpoolctl when available, else through the
environment (`OPENBLAS_NUM_THREADS`), which this script sets before importing NumPy for every run.
Prints the machine and the date, and writes benchmarks/results/host_gemm.{csv,md} and, with matplotlib
(the `bench` extra), host_gemm.png (`--name` replaces "host_gemm", so that a run of a few shapes does
not overwrite the table of all).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import probed_run  # benchmarks/ is on the path when run as a script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_SHAPES = ["128", "256", "512", "1024", "2048", "4096", "4096x64x64", "32768x256x128", "128x4096x512"]
FIELDS = ["shape", "threads", "swauto_threads", "candidate", "swauto_gflops", "numpy_gflops", "torch_gflops",
          "swauto_vs_numpy", "swauto_vs_torch", "peak_gflops", "swauto_peak_pct", "tuning_s", "compile_s", "runs"]


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.lower().split("x")]
    return (parts[0],) * 3 if len(parts) == 1 else tuple(parts)  # type: ignore[return-value]


def gemm_source(m: int, n: int, k: int) -> str:
    """examples/gemm.sw with tile sizes down to 32 (skinny shapes have dimensions below its 128) and up
    to 1024, 2048 for K: a wide C tile reads the other operand fewer times from DRAM (GEMM 2048^3 102 ->
    105 GFLOPS on a Zen 3), a deep one revisits C less often (GEMM 2048^3 on a Zen 5, one thread, in
    turns: the K = 512 pick at 81.7 - 86.1% of the peak, the K = 1024 one at 86.2 - 89.0%, calls of K =
    2048 at 86.2 - 89.3%). C = A B, as the peers compute it (`out=`): the example adds into C, which
    reads C too (GEMM 32768 x 256 x 128, one thread, calls of K = 128 in turns: 69.8 - 74.6% of the peak
    adding, 75.4 - 78.5% overwriting)."""
    text = (ROOT / "examples" / "gemm.sw").read_text().replace("C += C", "C = C")
    for dim, size in (("M", m), ("N", n), ("K", k)):
        largest = 2048 if dim == "K" else 1024
        tiles = sorted({t for t in (32, 64, 128, 256, 512, 1024, 2048) if t <= min(size, largest)}
                       | ({size} if size <= largest else set()))
        start = text.index(f"split gemm.{dim} by {{")
        end = text.index("}", start) + 1
        text = text[:start] + f"split gemm.{dim} by {{{', '.join(map(str, tiles))}}}" + text[end:]
    return text


def run_one(shape: tuple[int, int, int], threads: int, repeat: int, tuner: str) -> dict:
    """One shape at one thread count; runs in a child process so the BLAS thread count applies."""
    import numpy as np
    from common import paired_ratio, settle, turn_seconds  # benchmarks/ is on the path when run as a script

    import swauto
    from swauto.tuner.host_model import peak_probe

    m, n, k = shape
    started = time.perf_counter()
    kernel = swauto.compile(gemm_source(m, n, k), {"M": m, "N": n, "K": k}, target="host", tuner=tuner,
                            threads=threads)
    compile_s = time.perf_counter() - started - kernel.report["tuning_s"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), dtype=np.float32)
    flops = 2 * m * n * k
    kernel(A=a, B=b, C=c)  # what is timed computes what the peers do
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(k))
    peers = [lambda: np.matmul(a, b, out=c)]
    try:
        import torch
    except ImportError:
        pass  # NumPy alone
    else:
        torch.set_num_threads(threads)
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        peers.append(lambda: torch.matmul(ta, tb, out=tc))
    probe, probe_flops = peak_probe(threads)
    turns = turn_seconds(lambda: kernel(A=a, B=b, C=c), probe, *peers, repeat=repeat, settle=settle(threads))
    ours, peak_s, theirs, *torch_s = (statistics.median(samples) for samples in turns)
    row = {"shape": f"{m}x{n}x{k}", "threads": threads, "swauto_threads": kernel.threads,
           "candidate": kernel.schedule.describe(),
           "swauto_gflops": round(flops / ours / 1e9, 1), "numpy_gflops": round(flops / theirs / 1e9, 1),
           "torch_gflops": "", "swauto_vs_numpy": round(paired_ratio(turns[2], turns[0]), 3), "swauto_vs_torch": "",
           "peak_gflops": round(probe_flops / peak_s / 1e9, 1),
           "swauto_peak_pct": round(100 * flops / probe_flops * paired_ratio(turns[1], turns[0]), 1),
           "tuning_s": round(kernel.report["tuning_s"], 3), "compile_s": round(compile_s, 3)}
    if torch_s:
        row.update(torch_gflops=round(flops / torch_s[0] / 1e9, 1),
                   swauto_vs_torch=round(paired_ratio(turns[3], turns[0]), 3))
    return row


def machine_line() -> str:
    import numpy as np

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    from swauto.backends.host.isa import select

    return (f"{datetime.datetime.now().isoformat(timespec='seconds')}  {cpu}  {os.cpu_count()} cores  "
            f"ISA {select().name}  numpy {np.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tuner", default="model", choices=("model", "measure", "hybrid"))
    parser.add_argument("--name", default="host_gemm", help="the results files' name")
    parser.add_argument("--child", nargs=3, metavar=("SHAPE", "THREADS", "REPEAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, threads, repeat = args.child
        print(json.dumps(run_one(parse_shape(shape), int(threads), int(repeat), args.tuner)))
        return
    header = machine_line()
    print(header)
    rows = []
    for text in args.shapes:
        for threads in args.threads:
            env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
                   "MKL_NUM_THREADS": str(threads)}
            command = [sys.executable, __file__, "--tuner", args.tuner, "--child", text, str(threads),
                       str(args.repeat)]

            def child(command: list[str] = command, env: dict[str, str] = env) -> dict:
                result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                return json.loads(result.stdout.strip().splitlines()[-1])

            row = probed_run(child, threads)
            rows.append(row)
            print(f"{row['shape']:>16} t={threads}  swauto {row['swauto_gflops']:7.1f}"
                  f"  numpy {row['numpy_gflops']:7.1f}"
                  f"  torch {row['torch_gflops'] or '-':>7}  swauto/numpy {row['swauto_vs_numpy']:.3f}"
                  f"  swauto/torch {row['swauto_vs_torch'] or '-'}  peak {row['peak_gflops']:7.1f}"
                  f" ({row['swauto_peak_pct']:.1f}%)  tuning {row['tuning_s']:.2f} s  runs {row['runs']}"
                  f"  ({row['candidate']})", flush=True)
    write_results(rows, header, f"python benchmarks/host_gemm.py {' '.join(sys.argv[1:])}".strip(), args.name)


def write_results(rows: list[dict], header: str, command: str, name: str) -> None:
    """CSV, Markdown table and (with matplotlib) a bar chart of GFLOPS per shape and thread count, as
    results/`name`.{csv,md,png}."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"{name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"`{command}` — {header}; medians of calls, GFLOPS", "",
             "| shape (MxNxK) | threads | swauto on | swauto | NumPy (OpenBLAS) | PyTorch | swauto / NumPy "
             "| swauto / PyTorch "
             "| FMA peak in the same turns | swauto, % of it | tuning s | runs | candidate |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['shape']} | {r['threads']} | {r['swauto_threads']} | {r['swauto_gflops']} | {r['numpy_gflops']} "
              f"| {r['torch_gflops'] or '-'} "
              f"| {r['swauto_vs_numpy']} | {r['swauto_vs_torch'] or '-'} | {r['peak_gflops']} | {r['swauto_peak_pct']} "
              f"| {r['tuning_s']} | {r['runs']} | {r['candidate']} |"
              for r in rows]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install '.[bench]'): no PNG")
        return
    labels = [f"{r['shape']}\nt={r['threads']}" for r in rows]
    positions = range(len(rows))
    figure, axes = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    width = 0.27
    for offset, key, name in ((-width, "swauto_gflops", "swauto"), (0, "numpy_gflops", "NumPy (OpenBLAS)"),
                              (width, "torch_gflops", "PyTorch")):
        values = [float(r[key]) if r[key] != "" else 0.0 for r in rows]
        axes.bar([p + offset for p in positions], values, width, label=name)
    axes.set_xticks(list(positions), labels, fontsize=7)
    axes.set_ylabel("GFLOPS")
    axes.set_title(f"GEMM float32 — {header}", fontsize=8)
    axes.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / f"{name}.png", dpi=120)


if __name__ == "__main__":
    main()

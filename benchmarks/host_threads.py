"""Threads decided by the host model (issue 12): `swauto.compile` without `threads` runs a call on one
core where the model predicts that sharing it out (the measured fork and join of the native pool,
`Machine.parallel_call_seconds`) costs more than the second core saves. For each shape, the kernel it
built is timed on one core and on every core (the same code), and the choice is checked against them.

    python benchmarks/host_threads.py [--shapes 16 32 64 128 256 ...] [--repeat 101]

GEMMs of examples/gemm.sw (`S` is S x S x S, or `MxNxK`), model-tuned for every core; medians of
`--repeat` calls of `Kernel.run_arranged` (no argument checks), interleaved (one call on each thread
count in turn). Prints the machine and the date; writes benchmarks/results/host_threads.{csv,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from common import header, write_tables
from host_gemm import gemm_source, parse_shape

import swauto
from swauto.api import available_threads
from swauto.models.layers import arranged
from swauto.pipeline import before_double_buffering
from swauto.tuner import host_model

DEFAULT_SHAPES = ["8", "16", "32", "48", "64", "96", "128", "256", "512", "64x512x64", "512x64x64", "4096x64x64"]
FIELDS = ["shape", "chosen_threads", "predicted_1_us", "predicted_all_us", "measured_1_us", "measured_all_us",
          "faster_threads", "chosen_over_faster"]


def measure(shape: str, repeat: int) -> dict[str, object]:
    m, n, k = parse_shape(shape)
    cores = available_threads()
    kernel = swauto.compile(gemm_source(m, n, k), {"M": m, "N": n, "K": k}, target="host")
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(dims, dtype=np.float32)
              for name, dims in (("A", (m, k)), ("B", (k, n)), ("C", (m, n)))}
    ready = arranged(kernel, arrays)
    chosen = kernel.threads
    times: dict[int, list[float]] = {1: [], cores: []}
    for _ in range(repeat):
        for threads in times:
            kernel.threads = threads  # the same code on another thread count
            started = time.perf_counter()
            kernel.run_arranged(**ready)
            times[threads].append(time.perf_counter() - started)
    kernel.threads = chosen
    medians = {threads: statistics.median(seconds) for threads, seconds in times.items()}
    faster = min(medians, key=medians.get)
    module = before_double_buffering(kernel.stages)
    predicted = {t: host_model.estimate(module, t, host_model.machine()).seconds for t in (1, cores)}
    return {"shape": f"{m}x{n}x{k}", "chosen_threads": chosen, "predicted_1_us": round(1e6 * predicted[1], 2),
            "predicted_all_us": round(1e6 * predicted[cores], 2), "measured_1_us": round(1e6 * medians[1], 2),
            "measured_all_us": round(1e6 * medians[cores], 2), "faster_threads": faster,
            "chosen_over_faster": round(medians[chosen] / medians[faster], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--repeat", type=int, default=101)
    args = parser.parse_args()
    rows = [measure(shape, args.repeat) for shape in args.shapes]
    wrong = [row for row in rows if row["chosen_threads"] != row["faster_threads"]]
    fork_join = host_model.machine().parallel_call_seconds
    notes = (f"measured fork and join of a call on every core: {1e6 * fork_join:.2f} us; the model's thread "
             f"count was the faster one on {len(rows) - len(wrong)} of {len(rows)} shapes"
             + (f"; elsewhere the chosen count took {max(r['chosen_over_faster'] for r in wrong):.3f}x at most"
                if wrong else ""))
    print(header() + f"  medians of {args.repeat}")
    print(notes)
    for row in rows:
        print(row)
    write_tables("host_threads", FIELDS, rows, "Threads decided by the host model", notes=notes)


if __name__ == "__main__":
    main()

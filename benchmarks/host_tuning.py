"""The host model against measurement: does ranking by the model pick (nearly) the fastest candidate,
and how much faster is it than measuring?

    python benchmarks/host_tuning.py [--gemm 1024 2048] [--conv res2_3x3 res3_3x3] [--batch 1] [--threads 1]

For each operator: the model tuner's time (building the space is reported apart: both tuners need it)
and pick; every candidate's measured time (the black box: `--tuner measure`); the model's pick divided
by the best measured (1.00 = the model found the best). Prints the machine and the date; writes
benchmarks/results/host_tuning.{csv,md,png}.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from common import header, write_tables  # benchmarks/ is on the path when run as a script
from tqdm import tqdm

from swauto.api import load
from swauto.machine import local_memory_machine
from swauto.schedule.space import explore
from swauto.tuner.host_model import machine
from swauto.tuner.measure import rank_by_model, time_module

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
FIELDS = ["operator", "threads", "candidates", "space_s", "model_s", "measure_s", "speedup", "pick_ms", "best_ms",
          "pick_over_best"]


def conv_params(name: str, batch: int) -> dict[str, int]:
    rows = [r for r in csv.DictReader(line for line in LAYERS.open() if not line.startswith("#"))]
    row = next(r for r in rows if r["layer"] == name and r["model"] in ("resnet50", "vgg16"))
    ci, co, hw, k, stride, pad = (int(row[key]) for key in ("ci", "co", "in_hw", "k", "stride", "pad"))
    return {"B": batch, "Ni": ci, "No": co, "Ri": hw, "Ci": hw, "Kr": k, "Kc": k, "stride": stride, "pad": pad}


def compare(name: str, source: Path, params: dict[str, int], threads: int) -> dict[str, object]:
    op = load(source, params)
    started = time.perf_counter()
    space = explore(op, local_memory_machine("host"))  # with this CPU's micro-kernels
    space_s = time.perf_counter() - started
    host = machine()
    started = time.perf_counter()
    ranked = rank_by_model(space, threads, host)
    model_s = time.perf_counter() - started
    started = time.perf_counter()
    measured = {r.candidate: time_module(r.stages[-1][1], threads, micro_kernel=r.candidate.micro_kernel)
                for r in tqdm(ranked, desc=name, leave=False)}
    measure_s = time.perf_counter() - started
    best = min(measured.values())
    pick = measured[ranked[0].candidate]
    return {
        "operator": name, "threads": threads, "candidates": len(ranked), "space_s": round(space_s, 2),
        "model_s": round(model_s, 3), "measure_s": round(measure_s, 1), "speedup": round(measure_s / model_s),
        "pick_ms": round(pick * 1e3, 3), "best_ms": round(best * 1e3, 3), "pick_over_best": round(pick / best, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemm", type=int, nargs="*", default=[1024])
    parser.add_argument("--conv", nargs="*", default=["res2_3x3"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(header())
    jobs = [(f"gemm {s}^3", ROOT / "examples" / "gemm.sw", {"M": s, "N": s, "K": s}) for s in args.gemm]
    jobs += [(f"conv {c} B={args.batch}", ROOT / "examples" / "conv2d.sw", conv_params(c, args.batch))
             for c in args.conv]
    rows = []
    for name, source, params in jobs:
        row = compare(name, source, params, args.threads)
        rows.append(row)
        print(f"{name}: {row['candidates']} candidates; model {row['model_s']} s, measuring all {row['measure_s']} s "
              f"({row['speedup']}x); model's pick {row['pick_ms']} ms, best {row['best_ms']} ms "
              f"(pick / best {row['pick_over_best']}); building the space {row['space_s']} s")
    write_tables("host_tuning", FIELDS, rows, "The host model against measuring every candidate")


if __name__ == "__main__":
    main()

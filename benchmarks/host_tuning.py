"""The host model against measurement: does ranking by the model pick (nearly) the fastest candidate,
and how much faster is it than measuring?

    python benchmarks/host_tuning.py [--gemm 1024 2048 32768x256x128] [--conv res2_3x3 res3_3x3] [--batch 1 8]
                                     [--threads 1] [--layers mobilenetv2/block2.1.depthwise ...] [--sample N]
                                     [--name host_tuning]

A GEMM (`S` for S x S x S, or `MxNxK`) has the space benchmarks/host_gemm.py tunes (examples/gemm.sw
with tiles from 32 to 1024, 2048 for K). For each operator: the model tuner's time (building the
space is reported apart: both tuners need it)
and pick; every candidate's measured time (the black box: `--tuner measure`); the model's pick divided
by the best measured (1.00 = the model found the best), and the hybrid tuner's (the model's best 8,
measured). The model's pick, the hybrid's and the 5 fastest of the pass are timed again, interleaved, 5 x 3
runs each; those times give the best and the ratios (the fastest of hundreds of short measurements is
partly luck, and the machine's speed drifts during the pass). `--layers` names any
layer of the benchmark networks as model/layer (benchmarks/workloads/networks.csv and the workload
list; depthwise ones compile from conv2d_depthwise.sw); their weights are constants, arranged once
before the calls are timed, as in inference (`swauto.compile(constants=["weight"])`), and a convolution
(`--conv` and `--layers`) overwrites its output, as benchmarks/host_conv.py runs it (`overwriting`). With `--sample N`
only the model's best 8 and N other candidates drawn at random (seeded) are measured: "best" is then
the best of those, which measuring every candidate could only make faster. Prints the machine
and the date; writes benchmarks/results/host_tuning.{csv,md,png} (the plot: predicted against
measured time of every candidate) and host_tuning_candidates.csv (`--name` replaces "host_tuning").
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import time
from pathlib import Path

from common import (  # benchmarks/ is on the path when run as a script
    RESULTS,
    conv_example,
    csv_rows,
    header,
    layer_shapes,
    write_tables,
)
from host_conv import overwriting
from host_gemm import gemm_source, parse_shape
from tqdm import tqdm

from swauto.api import load
from swauto.machine import local_memory_machine
from swauto.tuner.host_model import machine
from swauto.tuner.measure import HYBRID_TOP, rank_by_model, time_module
from swauto.tuner.space import explore

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
FIELDS = ["operator", "threads", "candidates", "measured", "space_s", "model_s", "measure_s", "speedup", "pick_ms",
          "best_ms", "pick_over_best", "hybrid_over_best", "model_pick", "best"]
CANDIDATE_FIELDS = ["operator", "candidate", "predicted_ms", "measured_ms"]
RECHECK_ROUNDS = 5
RECHECK_BEST = 5


def conv_params(name: str, batch: int) -> dict[str, int]:
    rows = csv_rows(LAYERS)
    row = next(r for r in rows if r["layer"] == name and r["model"] in ("resnet50", "vgg16"))
    ci, co, hw, k, stride, pad = (int(row[key]) for key in ("ci", "co", "in_hw", "k", "stride", "pad"))
    return {"B": batch, "Ni": ci, "No": co, "Ri": hw, "Ci": hw, "Kr": k, "Kc": k, "stride": stride, "pad": pad}


def compare(name: str, source: Path | str, params: dict[str, int], threads: int,
            sample: int = 0, constants: tuple[str, ...] = ()) -> tuple[dict, list[dict]]:
    """The summary row of one operator (its inputs `constants` constant) and a row per measured candidate
    (all, or `sample` besides the model's best HYBRID_TOP)."""
    op = load(source, params, constants=constants)
    started = time.perf_counter()
    space = explore(op, local_memory_machine("host"))  # with this CPU's micro-kernels
    space_s = time.perf_counter() - started
    host = machine()
    started = time.perf_counter()
    ranked = rank_by_model(space, threads, host)
    model_s = time.perf_counter() - started
    started = time.perf_counter()
    chosen = ranked
    if sample:
        rest = ranked[HYBRID_TOP:]
        chosen = ranked[:HYBRID_TOP] + random.Random(0).sample(rest, min(sample, len(rest)))
    measured = {r.candidate: time_module(r.stages[-1][1], threads, knobs=host.knobs(r.candidate.micro_kernel))
                for r in tqdm(chosen, desc=name, leave=False)}
    measure_s = time.perf_counter() - started
    pick = ranked[0].candidate
    hybrid = min((r.candidate for r in ranked[:HYBRID_TOP]), key=measured.__getitem__)
    # The fastest of hundreds of 3-run medians is partly luck, and a drift of the machine's speed during
    # the pass hides others (a shared guest's 1 x 1 layer ran 0.67 and 1.1 ms minutes apart): time the
    # pick, the hybrid's and the pass's RECHECK_BEST fastest again, interleaved, with more runs; the best
    # is the fastest of those times.
    fastest = sorted(measured, key=measured.__getitem__)[:RECHECK_BEST]
    stages = {r.candidate: r.stages for r in ranked}
    again: dict = {c: [] for c in dict.fromkeys([pick, hybrid, *fastest])}
    for _ in range(RECHECK_ROUNDS):
        for c in again:
            again[c].append(time_module(stages[c][-1][1], threads, runs=3, knobs=host.knobs(c.micro_kernel)))
    rechecked = {c: statistics.median(times) for c, times in again.items()}
    best = min(rechecked, key=rechecked.__getitem__)
    row = {
        "operator": name, "threads": threads, "candidates": len(ranked), "measured": len(chosen),
        "space_s": round(space_s, 2),
        "model_s": round(model_s, 3), "measure_s": round(measure_s, 1), "speedup": round(measure_s / model_s),
        "pick_ms": round(rechecked[pick] * 1e3, 3), "best_ms": round(rechecked[best] * 1e3, 3),
        "pick_over_best": round(rechecked[pick] / rechecked[best], 3),
        "hybrid_over_best": round(rechecked[hybrid] / rechecked[best], 3),
        "model_pick": pick.describe(), "best": best.describe(),
    }
    candidates = [{"operator": name, "candidate": r.candidate.describe(),
                   "predicted_ms": round(r.predicted.seconds * 1e3, 4),
                   "measured_ms": round(measured[r.candidate] * 1e3, 4)} for r in chosen]
    return row, candidates


def plot(candidates: list[dict], name: str) -> None:
    """Predicted against measured time of every candidate, one panel per operator."""
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    operators = list(dict.fromkeys(c["operator"] for c in candidates))
    figure, axes = plt.subplots(1, len(operators), figsize=(5 * len(operators), 4.5), squeeze=False)
    for axis, operator in zip(axes[0], operators, strict=True):
        rows = [c for c in candidates if c["operator"] == operator]
        axis.scatter([c["measured_ms"] for c in rows], [c["predicted_ms"] for c in rows], s=6, alpha=0.5)
        axis.scatter([rows[0]["measured_ms"]], [rows[0]["predicted_ms"]], color="red", label="model's pick")
        low = min(min(c["measured_ms"], c["predicted_ms"]) for c in rows)
        high = max(max(c["measured_ms"], c["predicted_ms"]) for c in rows)
        axis.plot([low, high], [low, high], color="gray", linewidth=0.8)
        axis.set(title=operator, xlabel="measured ms", ylabel="predicted ms (host model)")
        axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / f"{name}.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemm", type=parse_shape, nargs="*", default=[parse_shape("1024")])
    parser.add_argument("--conv", nargs="*", default=["res2_3x3"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--name", default="host_tuning", help="the results files' name")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", nargs="*", default=[], help="model/layer of the benchmark networks")
    parser.add_argument("--sample", type=int, default=0, help="measure the model's best 8 and this many others")
    args = parser.parse_args()
    print(header())
    jobs = [(f"gemm {m}x{n}x{k}", gemm_source(m, n, k), {"M": m, "N": n, "K": k}, ())
            for m, n, k in args.gemm]
    jobs += [(f"conv {c} B={batch}", overwriting("conv2d.sw"), conv_params(c, batch), ("weight",))
             for c in args.conv for batch in args.batch]
    for wanted in args.layers:
        layer = next((row for row in layer_shapes() if f"{row['model']}/{row['layer']}" == wanted), None)
        for batch in args.batch:
            if layer is None or (found := conv_example(layer, batch)) is None:
                parser.error(f"no benchmark layer {wanted!r} that compiles (model/layer, as in networks.csv)")
            jobs.append((f"{wanted} B={batch}", overwriting(found[0]), found[1], ("weight",)))
    rows, candidates = [], []
    for name, source, params, constants in jobs:
        row, measured = compare(name, source, params, args.threads, args.sample, constants)
        rows.append(row)
        candidates += measured
        print(f"{name}: {row['candidates']} candidates, {row['measured']} measured; model {row['model_s']} s, "
              f"measuring {row['measure_s']} s "
              f"({row['speedup']}x); model's pick {row['pick_ms']} ms, best {row['best_ms']} ms "
              f"(pick / best {row['pick_over_best']}); building the space {row['space_s']} s")
    measured = f"its best {HYBRID_TOP} and {args.sample} other candidates" if args.sample else "every candidate"
    write_tables(args.name, FIELDS, rows, f"The host model against measuring {measured}")
    with open(RESULTS / f"{args.name}_candidates.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CANDIDATE_FIELDS)
        writer.writeheader()
        writer.writerows(candidates)
    plot(candidates, args.name)


if __name__ == "__main__":
    main()

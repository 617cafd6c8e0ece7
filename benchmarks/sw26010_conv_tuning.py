"""Model-based against black-box tuning of convolution layers on the simulated SW26010 (thesis table 6.1
and figure 6.9: choosing by the model loses < 2% on average, < 8% at worst, and tunes 350-450x faster;
~70% of peak with 3x3 kernels).

    python benchmarks/sw26010_conv_tuning.py [--batches 1 32 128] [--models vgg16 resnet50] [--all] [--jobs 2]

Layers: ../shared/workloads/cnn_conv_layers.csv with Ci, Co >= 64 (by default those of VGG16 and
ResNet50 whose 3x3 or 1x1 shapes are distinct; `--all` takes every model of the file). The operator is
examples/conv2d.sw. For each layer and batch: the space is built; the model ranks every candidate (its
wall time is the model's tuning time); the timed simulator times every candidate (the black box, its
wall time); reported are the simulated % of a core group's peak of the model's pick, the model's pick
over the black-box best (simulated times), the hybrid tuner's (the model's best 8, simulated) likewise,
and the speed-ups: model against our black box, and model against running every candidate once on the
machine (the sum of their simulated times: what black-box tuning on the hardware would cost at least).
Writes benchmarks/results/sw26010_conv_tuning.{csv,md,png}.
"""

from __future__ import annotations

import argparse
import csv
import time
from multiprocessing import Pool

from sw26010_common import RESULTS, ROOT, header, write_tables
from tqdm import tqdm

LAYERS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
HYBRID_TOP = 8
FIELDS = ["model", "layer", "B", "ci", "co", "hw", "k", "stride", "candidates", "model_pick_peak_pct", "best_peak_pct",
          "pick_over_best", "hybrid_over_best", "model_s", "black_box_s", "speedup", "hardware_black_box_s",
          "hardware_speedup", "model_pick"]


def layers(models: list[str] | None) -> list[dict]:
    with open(LAYERS) as source:
        rows = list(csv.DictReader(line for line in source if not line.startswith("#")))
    chosen, seen = [], set()
    for row in rows:
        if int(row["ci"]) < 64 or int(row["co"]) < 64 or (models and row["model"] not in models):
            continue
        shape = tuple(row[k] for k in ("ci", "co", "in_hw", "k", "stride", "pad"))
        if shape not in seen:
            seen.add(shape)
            chosen.append(row)
    return chosen


def tune_layer(task: tuple[dict, int]) -> dict:
    from swauto.api import load
    from swauto.machine import SUNWAY
    from swauto.schedule.space import explore
    from swauto.tuner.model_tuner import rank
    from swauto.tuner.simulate import simulate_all

    layer, batch = task
    params = {"B": batch, "Ni": int(layer["ci"]), "No": int(layer["co"]), "Ri": int(layer["in_hw"]),
              "Ci": int(layer["in_hw"]), "Kr": int(layer["k"]), "Kc": int(layer["k"]), "stride": int(layer["stride"]),
              "pad": int(layer["pad"])}
    op = load(ROOT / "examples" / "conv2d.sw", params)
    space = explore(op, SUNWAY)
    started = time.perf_counter()
    ranked = rank(space, "sw26010")
    model_s = time.perf_counter() - started
    started = time.perf_counter()
    simulated = simulate_all(ranked)
    black_box_s = time.perf_counter() - started
    from swauto.ir.analysis import traffic

    flops = traffic(op.seed)[1]
    best = min(s.simulated_s for s in simulated)
    pick = simulated[0]
    hybrid = min(s.simulated_s for s in simulated[:HYBRID_TOP])
    hardware = sum(s.simulated_s for s in simulated)
    return {"model": layer["model"], "layer": layer["layer"], "B": batch, "ci": params["Ni"], "co": params["No"],
            "hw": params["Ri"], "k": params["Kr"], "stride": params["stride"], "candidates": len(simulated),
            "model_pick_peak_pct": round(100 * flops / pick.simulated_s / SUNWAY.peak_flops, 2),
            "best_peak_pct": round(100 * flops / best / SUNWAY.peak_flops, 2),
            "pick_over_best": round(pick.simulated_s / best, 4), "hybrid_over_best": round(hybrid / best, 4),
            "model_s": round(model_s, 3), "black_box_s": round(black_box_s, 3),
            "speedup": round(black_box_s / model_s, 1), "hardware_black_box_s": round(hardware, 3),
            "hardware_speedup": round(hardware / model_s, 1), "model_pick": pick.ranked.candidate.describe()}


def summary(rows: list[dict]) -> list[str]:
    ratios = [r["pick_over_best"] for r in rows]
    hybrid = [r["hybrid_over_best"] for r in rows]
    three = [r for r in rows if r["k"] == 3 and r["B"] in (32, 128)]
    lines = [
        f"{len(rows)} layer x batch runs. Model's pick / black-box best (simulated time): mean "
        f"{sum(ratios) / len(ratios):.4f}, worst {max(ratios):.4f} (thesis: < 1.02, < 1.08); hybrid (top "
        f"{HYBRID_TOP}): mean {sum(hybrid) / len(hybrid):.4f}, worst {max(hybrid):.4f}.",
        f"Tuning time: model {sum(r['model_s'] for r in rows):.1f} s in all, black box (our simulator) "
        f"{sum(r['black_box_s'] for r in rows):.1f} s: {sum(r['black_box_s'] for r in rows) / sum(r['model_s'] for r in rows):.1f}x; "
        f"against running every candidate once on the machine "
        f"({sum(r['hardware_black_box_s'] for r in rows):.1f} s): "
        f"{sum(r['hardware_black_box_s'] for r in rows) / sum(r['model_s'] for r in rows):.1f}x (thesis: 350-450x).",
    ]
    for batch in sorted({r["B"] for r in rows}):
        chosen = [r["model_pick_peak_pct"] for r in rows if r["B"] == batch]
        lines.append(f"B = {batch}: model's pick at {sum(chosen) / len(chosen):.1f}% of peak on average "
                     f"(min {min(chosen):.1f}%, max {max(chosen):.1f}%).")
    if three:
        lines.append(f"3x3 layers at B = 32 and 128: model's pick at {sum(r['model_pick_peak_pct'] for r in three) / len(three):.1f}% "
                     f"of peak on average, min {min(r['model_pick_peak_pct'] for r in three):.1f}% (thesis ~70%).")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--models", nargs="+", default=["vgg16", "resnet50"])
    parser.add_argument("--all", action="store_true", help="every model of the layer file")
    parser.add_argument("--jobs", type=int, default=2, help="layers tuned in parallel (processes)")
    args = parser.parse_args()
    print(header())
    tasks = [(layer, batch) for layer in layers(None if args.all else args.models) for batch in args.batches]
    with Pool(args.jobs) as pool:
        rows = list(tqdm(pool.imap(tune_layer, tasks), total=len(tasks), desc="layers x batches"))
    lines = summary(rows)
    for line in lines:
        print(line)
    write_tables("sw26010_conv_tuning", FIELDS, rows, "Convolution layers: model-based against black-box tuning "
                 "(simulated SW26010, one core group)", "  \n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [f"{r['model'][:6]} {r['layer']} B{r['B']}" for r in rows]
    axes[0].bar(range(len(rows)), [r["model_pick_peak_pct"] for r in rows], label="model's pick")
    axes[0].plot(range(len(rows)), [r["best_peak_pct"] for r in rows], "k_", markersize=8, label="black-box best")
    axes[0].set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    axes[0].set(ylabel="% of a core group's peak (simulated)", title="model-tuned convolution layers")
    axes[0].legend()
    axes[1].bar(range(len(rows)), [r["pick_over_best"] for r in rows])
    axes[1].set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    axes[1].set(ylabel="model's pick / black-box best (time)", ylim=(0.95, max(1.1, max(r["pick_over_best"] for r in rows))),
                title="loss of choosing by the model")
    figure.tight_layout()
    figure.savefig(RESULTS / "sw26010_conv_tuning.png", dpi=120)
    print(f"wrote {RESULTS}/sw26010_conv_tuning.{{csv,md,png}}")


if __name__ == "__main__":
    main()

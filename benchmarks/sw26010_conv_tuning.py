"""Model-based against black-box tuning of convolution layers on the simulated SW26010 (thesis table 6.1
and figure 6.9: choosing by the model loses < 2% on average, < 8% at worst, and tunes 350-450x faster;
~70% of peak with 3x3 kernels).

    python benchmarks/sw26010_conv_tuning.py [--batches 1 32 128] [--layers vgg16/conv3_2 ...] [--all] [--jobs 2]
    python benchmarks/sw26010_conv_tuning.py --rerank   # after a change of the model: its picks only

Layers: ../shared/workloads/cnn_conv_layers.csv with Ci, Co >= 64. By default six VGG16 and ResNet50
layers (3x3 and 1x1, 7 to 112 pixels; the black box over all of them takes about ten minutes on two
cores); `--all` takes every distinct shape of the file (37 shapes: about 40 minutes with one job). The
batches run one after the other in the given order; each finished row is also appended to
benchmarks/results/sw26010_conv_tuning.partial.csv (removed when the tables are written). The operator is
examples/conv2d.sw. For each layer and batch: the space is built; the model ranks every candidate (its
wall time is the model's tuning time); the timed simulator times every candidate (the black box, its
wall time); reported are the simulated % of a core group's peak of the model's pick, the model's pick
over the black-box best (simulated times), the same with the thesis' equation 4-2 alone for the GEMM
primitive instead of the refined model (a baseline: `pick_4_2_over_best`), the hybrid tuner's (the
model's best 8, simulated) likewise, and the speed-ups: model against our black box, and model
against running every candidate once on the machine (the sum of their simulated times: what
black-box tuning on the hardware would cost at least).
`--rerank` ranks every run of the stored table again and simulates only the new picks (the model's,
equation 4-2's, the hybrid's 8), against the stored black-box best: a model change is judged in
minutes, without the black box's hours. Writes benchmarks/results/sw26010_conv_tuning.{csv,md,png}.
"""

from __future__ import annotations

import argparse
import csv
import time
from multiprocessing import Pool

from common import RESULTS, ROOT, csv_number, csv_rows, header, write_tables
from tqdm import tqdm

LAYERS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
HYBRID_TOP = 8
DEFAULT_LAYERS = ["vgg16/conv2_2", "vgg16/conv3_2", "vgg16/conv5_1", "resnet50/res3_3x3", "resnet50/res4_1x1b",
                  "resnet50/res5_3x3"]
FIELDS = ["model", "layer", "B", "ci", "co", "hw", "k", "stride", "candidates", "model_pick_peak_pct", "best_peak_pct",
          "pick_over_best", "pick_4_2_over_best", "hybrid_over_best", "model_s", "black_box_s", "speedup",
          "hardware_black_box_s", "hardware_speedup", "model_pick"]


def layers(names: list[str] | None) -> list[dict]:
    """Rows of the layer file with Ci, Co >= 64 named `model/layer` in `names` (every distinct shape
    with None)."""
    chosen, seen = [], set()
    for row in csv_rows(LAYERS):
        if int(row["ci"]) < 64 or int(row["co"]) < 64 or (names and f"{row['model']}/{row['layer']}" not in names):
            continue
        shape = tuple(row[k] for k in ("ci", "co", "in_hw", "k", "stride", "pad"))
        if shape not in seen:
            seen.add(shape)
            chosen.append(row)
    return chosen


def params_of(layer: dict, batch: int) -> dict[str, int]:
    """`examples/conv2d.sw`'s parameters for a row of the workload list at batch `batch`."""
    return {"B": batch, "Ni": int(layer["ci"]), "No": int(layer["co"]), "Ri": int(layer["in_hw"]),
            "Ci": int(layer["in_hw"]), "Kr": int(layer["k"]), "Kc": int(layer["k"]), "stride": int(layer["stride"]),
            "pad": int(layer["pad"])}


def tune_layer(task: tuple[dict, int, dict | None]) -> dict:
    """One layer at one batch: the model's ranking and its picks' simulated times against the black-box
    best. With a `stored` row of an earlier run, only the picks are simulated and the black box's
    columns are kept (its best is exact to the stored percentage's rounding)."""
    from dataclasses import replace

    from swauto.api import load
    from swauto.backends.sw26010.target import estimate
    from swauto.errors import ScheduleError
    from swauto.ir.analysis import traffic
    from swauto.machine import SUNWAY
    from swauto.tuner.model_tuner import Ranked, rank
    from swauto.tuner.simulate import simulate_all
    from swauto.tuner.space import explore

    layer, batch, stored = task
    params = params_of(layer, batch)
    op = load(ROOT / "examples" / "conv2d.sw", params)
    head = {"model": layer["model"], "layer": layer["layer"], "B": batch, "ci": params["Ni"], "co": params["No"],
            "hw": params["Ri"], "k": params["Kr"], "stride": params["stride"]}
    try:
        space = explore(op, SUNWAY)
    except ScheduleError as error:  # e.g. a 512 x 512 weight slice does not fit local memory at this batch
        return {**head, "candidates": 0, "model_pick": f"no legal candidate: {str(error).split('(')[-1].rstrip(')')}"}
    started = time.perf_counter()
    ranked = rank(space, "sw26010")
    model_s = time.perf_counter() - started
    eq42 = replace(SUNWAY, gemm_equation="4-2")  # the thesis' equation alone, ranked as `rank` ranks

    def by_4_2(entry: Ranked) -> tuple[float, int]:
        predicted = estimate(entry.stages, 1, machine=eq42)
        return predicted.seconds, predicted.dma_bytes

    pick_4_2 = min(ranked, key=by_4_2)
    flops = traffic(op.seed)[1]

    def peak_pct(seconds: float) -> float:
        return round(100 * flops / seconds / SUNWAY.peak_flops, 2)

    if stored is None:
        started = time.perf_counter()
        simulated = {id(s.ranked): s.simulated_s for s in simulate_all(ranked)}
        black_box = {"black_box_s": round(time.perf_counter() - started, 3),
                     "hardware_black_box_s": round(sum(simulated.values()), 3)}
        best = min(simulated.values())
    else:
        simulated = {id(s.ranked): s.simulated_s for s in simulate_all([*ranked[:HYBRID_TOP], pick_4_2])}
        black_box = {k: stored[k] for k in ("black_box_s", "hardware_black_box_s")}
        best = flops / (stored["best_peak_pct"] / 100 * SUNWAY.peak_flops)
        if peak_pct(min(simulated.values())) > stored["best_peak_pct"]:
            raise RuntimeError(f"{layer['model']}/{layer['layer']} at B = {batch}: a pick beats the stored "
                               "black-box best; the simulator changed since, run the black box again")

    def over_best(seconds: float) -> float:  # the stored best's rounding must not make a tie look faster
        return 1.0 if peak_pct(seconds) == peak_pct(best) else round(seconds / best, 4)

    pick = ranked[0]
    hybrid = min(simulated[id(r)] for r in ranked[:HYBRID_TOP])
    return {**head, "candidates": len(ranked), "model_pick_peak_pct": peak_pct(simulated[id(pick)]),
            "best_peak_pct": peak_pct(best), "pick_over_best": over_best(simulated[id(pick)]),
            "pick_4_2_over_best": over_best(simulated[id(pick_4_2)]), "hybrid_over_best": over_best(hybrid),
            "model_s": round(model_s, 4), **black_box, "speedup": round(black_box["black_box_s"] / model_s, 1),
            "hardware_speedup": round(black_box["hardware_black_box_s"] / model_s, 1),
            "model_pick": pick.candidate.describe()}


def summary(all_rows: list[dict]) -> list[str]:
    rows = [r for r in all_rows if r["candidates"]]
    ratios = [r["pick_over_best"] for r in rows]
    model_s = sum(r["model_s"] for r in rows)
    black_box_s = sum(r["black_box_s"] for r in rows)
    hardware_s = sum(r["hardware_black_box_s"] for r in rows)
    hybrid = [r["hybrid_over_best"] for r in rows]
    eq42 = [r["pick_4_2_over_best"] for r in rows]
    three = [r for r in rows if r["k"] == 3 and r["B"] in (32, 128)]
    lines = [
        f"{len(rows)} layer x batch runs ({len(all_rows) - len(rows)} without a legal candidate). "
        f"Model's pick / black-box best (simulated time): mean "
        f"{sum(ratios) / len(ratios):.4f}, worst {max(ratios):.4f} (thesis: < 1.02, < 1.08); with equation 4-2 "
        f"alone: mean {sum(eq42) / len(eq42):.4f}, worst {max(eq42):.4f}; hybrid (top "
        f"{HYBRID_TOP}): mean {sum(hybrid) / len(hybrid):.4f}, worst {max(hybrid):.4f}.",
        f"Tuning time: model {model_s:.1f} s in all, black box (our simulator) {black_box_s:.1f} s: "
        f"{black_box_s / model_s:.1f}x; against running every candidate once on the machine ({hardware_s:.1f} s): "
        f"{hardware_s / model_s:.1f}x (thesis: 350-450x).",
    ]
    for network in dict.fromkeys(r["model"] for r in rows):  # table 6.1
        mine = [r for r in rows if r["model"] == network]
        lines.append(f"{network}: {sum(r['candidates'] for r in mine)} candidates over {len(mine)} runs "
                     f"({sum(r['candidates'] for r in mine) / len(mine):.0f} on average); black box "
                     f"{sum(r['black_box_s'] for r in mine):.0f} s on our simulator, "
                     f"{sum(r['hardware_black_box_s'] for r in mine):.1f} s of simulated runs; model "
                     f"{sum(r['model_s'] for r in mine):.2f} s.")
    for batch in sorted({r["B"] for r in rows}):
        chosen = [r["model_pick_peak_pct"] for r in rows if r["B"] == batch]
        lines.append(f"B = {batch}: model's pick at {sum(chosen) / len(chosen):.1f}% of peak on average "
                     f"(min {min(chosen):.1f}%, max {max(chosen):.1f}%).")
    if three:
        peaks = [r["model_pick_peak_pct"] for r in three]
        lines.append(f"3x3 layers at B = 32 and 128: model's pick at {sum(peaks) / len(peaks):.1f}% of peak on average "
                     f"(min {min(peaks):.1f}%; thesis ~70%).")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--layers", nargs="+", default=DEFAULT_LAYERS, metavar="MODEL/LAYER")
    parser.add_argument("--all", action="store_true", help="every model of the layer file")
    parser.add_argument("--jobs", type=int, default=2, help="layers tuned in parallel (processes)")
    parser.add_argument("--finish", action="store_true",
                        help="write the tables from the rows a cut-short run left in the .partial.csv")
    parser.add_argument("--rerank", action="store_true",
                        help="rank every run of the stored table again with the current model and simulate only "
                             "its picks, against the stored black-box best (minutes instead of hours)")
    args = parser.parse_args()
    print(header())
    stored: dict[tuple[str, int], dict] = {}  # (model/layer, batch) -> a row of the stored table with candidates
    if args.rerank:
        for text in csv_rows(RESULTS / "sw26010_conv_tuning.csv"):
            row = {k: csv_number(v) for k, v in text.items()}
            if row["candidates"]:
                stored[f"{row['model']}/{row['layer']}", row["B"]] = row
        args.layers = list(dict.fromkeys(name for name, _ in stored))
        args.batches = list(dict.fromkeys(batch for _, batch in stored))
    chosen = layers(args.layers if args.rerank or not args.all else None)
    # Batch by batch (the first given first), so that a run cut short has whole batches; each row is
    # also appended to a .partial.csv as it completes (removed once the tables are written).
    tasks = [(layer, batch, stored.get((f"{layer['model']}/{layer['layer']}", batch)))
             for batch in args.batches for layer in chosen]
    partial = RESULTS / "sw26010_conv_tuning.partial.csv"
    rows = []
    if args.finish:
        with open(partial, newline="") as log:
            rows = [{k: csv_number(v) for k, v in row.items()} for row in csv.DictReader(log)]
    else:
        with Pool(args.jobs) as pool, open(partial, "w", newline="") as log:
            writer = csv.DictWriter(log, FIELDS)
            writer.writeheader()
            for row in tqdm(pool.imap(tune_layer, tasks), total=len(tasks), desc="layers x batches"):
                rows.append(row)
                writer.writerow(row)
                log.flush()
    position = {f"{layer['model']}/{layer['layer']}": i for i, layer in enumerate(chosen)}
    rows.sort(key=lambda r: (position[f"{r['model']}/{r['layer']}"], args.batches.index(r["B"])))
    lines = summary(rows)
    for line in lines:
        print(line)
    write_tables("sw26010_conv_tuning", FIELDS, rows, "Convolution layers: model-based against black-box tuning "
                 "(simulated SW26010, one core group)", "  \n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["candidates"]]
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [f"{r['model'][:6]} {r['layer']} B{r['B']}" for r in rows]
    axes[0].bar(range(len(rows)), [r["model_pick_peak_pct"] for r in rows], label="model's pick")
    axes[0].plot(range(len(rows)), [r["best_peak_pct"] for r in rows], "k_", markersize=8, label="black-box best")
    axes[0].set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    axes[0].set(ylabel="% of a core group's peak (simulated)", title="model-tuned convolution layers")
    axes[0].legend()
    axes[1].bar(range(len(rows)), [r["pick_over_best"] for r in rows])
    axes[1].set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    top = max(1.1, max(r["pick_over_best"] for r in rows))
    axes[1].set(ylabel="model's pick / black-box best (time)", ylim=(0.95, top), title="loss of choosing by the model")
    figure.tight_layout()
    figure.savefig(RESULTS / "sw26010_conv_tuning.png", dpi=120)
    partial.unlink()
    print(f"wrote {RESULTS}/sw26010_conv_tuning.{{csv,md,png}}")


if __name__ == "__main__":
    main()

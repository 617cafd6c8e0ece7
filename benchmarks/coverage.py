"""Every convolution layer of the workload list and of ResNet-18, MobileNetV2 and Inception-v3 through
the model tuner, on both targets (issue 11: coverage and compile time).

    python benchmarks/coverage.py [--targets sw26010 host] [--batches 1 32 128] [--layers N]

Layers: ../shared/workloads/cnn_conv_layers.csv and benchmarks/workloads/networks.csv, each distinct
shape once (`--layers N`: the first N). Each is compiled from `examples/conv2d.sw` as written, as
`swauto.compile(..., tuner="model")` does up to its choice, in one process, one after the other: parse
and check, rank the candidates' sketches, lower the cheapest, rank those on their real IR. Reported per
layer and batch: the space's size, the wall time from parse to chosen candidate (cold: nothing is
remembered between layers but the parser), and the pick's predicted time, GFLOPS and percent of the
target's peak (a core group of the simulated SW26010; one core of this host, priced for one thread),
counting the layer's own flops, not the zeros of a padded primitive call;
or why nothing compiled. Depthwise layers (MobileNetV2's, groups = channels) compile from
`examples/conv2d_depthwise.sw`. Writes benchmarks/results/coverage.{csv,md,png}.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import RESULTS, ROOT, SHAPE, conv_example, header, layer_shapes, write_tables
from tqdm import tqdm

FIELDS = ["target", "model", "layer", "B", *SHAPE, "status", "candidates", "tune_s", "pick_ms", "gflops",
          "peak_pct", "pick"]


def measure(target_name: str, layer: dict[str, str], batch: int) -> dict[str, object]:
    from swauto import targets
    from swauto.api import load, tune_by_model
    from swauto.errors import ScheduleError
    from swauto.ir.analysis import traffic

    row: dict[str, object] = {"target": target_name, "model": layer["model"], "layer": layer["layer"], "B": batch,
                              **{k: int(layer[k]) for k in SHAPE}}
    target = targets.get(target_name)
    found = conv_example(layer, batch)
    if found is None:
        row["status"] = f"not covered: {layer['groups']} groups"
        return row
    example, params = found
    started = time.perf_counter()
    try:
        op = load(ROOT / "examples" / example, params)
        ranked, space = tune_by_model(op, target)
        picked = ranked[0]
    except ScheduleError as error:
        row.update(status=f"no legal candidate ({str(error).split('(')[-1].rstrip(')')})",
                   tune_s=time.perf_counter() - started)
        return row
    seconds = picked.estimate.seconds
    flops = traffic(op.seed)[1]  # the layer's own work, not the zeros a padded primitive call adds
    row.update(status="ok", candidates=space.total, tune_s=time.perf_counter() - started, pick_ms=1e3 * seconds,
               gflops=flops / seconds / 1e9, peak_pct=100 * flops / seconds / target.peak_flops(1),
               pick=picked.candidate.describe())
    return row


def summary(rows: list[dict[str, object]], targets: list[str], batches: list[int]) -> list[str]:
    lines = []
    for target in targets:
        for batch in batches:
            runs = [row for row in rows if row["target"] == target and row["B"] == batch]
            compiled = [row for row in runs if row["status"] == "ok"]
            depthwise = [row for row in compiled if row["groups"] != 1]
            times = [float(row["tune_s"]) for row in compiled]
            line = f"{target} B={batch}: {len(compiled)} of {len(runs)} layers compile ({len(depthwise)} depthwise)"
            if times:
                line += (f"; model tuning median {statistics.median(times):.2f} s, worst {max(times):.2f} s; "
                         f"pick median {statistics.median(float(r['peak_pct']) for r in compiled):.0f}% of peak")
            lines.append(line)
    return lines


def plot(rows: list[dict[str, object]], targets: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(targets), figsize=(6 * len(targets), 4), squeeze=False)
    for axis, target in zip(axes[0], targets, strict=True):
        for batch in sorted({int(row["B"]) for row in rows}):
            times = sorted(float(row["tune_s"]) for row in rows
                           if row["target"] == target and row["B"] == batch and row["status"] == "ok")
            axis.plot(range(len(times)), times, marker=".", linestyle="", label=f"B = {batch}")
        for limit in (0.3, 1.0):
            axis.axhline(limit, color="grey", linewidth=0.8, linestyle="--")
        axis.set_yscale("log")
        axis.set_title(f"model tuning per conv layer, {target}")
        axis.set_xlabel("layers, sorted by time")
        axis.set_ylabel("seconds, parse to chosen candidate")
        axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "coverage.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=["sw26010", "host"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32, 128])
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()
    shapes = layer_shapes()[: args.layers]
    tasks = [(target, layer, batch) for target in args.targets for batch in args.batches for layer in shapes]
    rows = [measure(*task) for task in tqdm(tasks, desc="compiling layers", unit="layer")]
    notes = summary(rows, args.targets, args.batches)
    print(header())
    print("\n".join(notes))
    write_tables("coverage", FIELDS, rows, "Every conv layer through the model tuner: coverage and compile time",
                 notes="\n".join(notes), group="target")
    plot(rows, args.targets)


if __name__ == "__main__":
    main()

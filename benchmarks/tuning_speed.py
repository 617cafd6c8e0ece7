"""Model tuning end to end, ranked before lowering against every candidate lowered (issue 11: compile
time), on both targets.

    python benchmarks/tuning_speed.py [--targets sw26010 host] [--batches 1 32] [--layers N]

For each distinct layer shape of ../shared/workloads/cnn_conv_layers.csv (`examples/conv2d.sw`, every
layer; `--layers N` takes the first N) and batch, in one process, one after the other:
- `ranked`: what the model tuner does (`swauto.compile(..., tuner="model")` up to its choice):
  parse and check the source, price every candidate's sketch, lower the fastest 16, rank those by the
  model on their real IR;
- `exhaustive`: the same with every candidate lowered and ranked (the tuner before sketches);
- the pick of each, priced by the model on its real IR: `ranked / exhaustive` is 1 where the
  ranked pick is as fast, below 1 never (the exhaustive pick is the model's best).
Times are wall seconds of one cold run each (no tuning log: the functions are called directly; the
ranked run comes first, so the exhaustive one finds a few schedules remembered, which only flatters
it). On the host, candidates are priced for one thread. Writes benchmarks/results/tuning_speed.{csv,md}
and tuning_speed.png (per target, each layer's two times).
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import RESULTS, ROOT, csv_rows, header, write_tables
from tqdm import tqdm

LAYERS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
FIELDS = ["target", "model", "layer", "B", "ci", "co", "hw", "k", "stride", "candidates", "lowered", "ranked_s",
          "exhaustive_s", "speedup", "pick_over_best", "pick"]


def layer_shapes() -> list[dict[str, str]]:
    seen, chosen = set(), []
    for row in csv_rows(LAYERS):
        shape = tuple(row[k] for k in ("ci", "co", "in_hw", "k", "stride", "pad"))
        if shape not in seen:
            seen.add(shape)
            chosen.append(row)
    return chosen


def measure(target_name: str, layer: dict[str, str], batch: int) -> dict[str, object]:
    from swauto import targets
    from swauto.api import load, tune_by_model
    from swauto.errors import ScheduleError
    from swauto.tuner.model_tuner import rank
    from swauto.tuner.space import explore

    target = targets.get(target_name)
    machine = target.machine()
    params = {"B": batch, "Ni": int(layer["ci"]), "No": int(layer["co"]), "Ri": int(layer["in_hw"]),
              "Ci": int(layer["in_hw"]), "Kr": int(layer["k"]), "Kc": int(layer["k"]), "stride": int(layer["stride"]),
              "pad": int(layer["pad"])}
    row: dict[str, object] = {"target": target_name, "model": layer["model"], "layer": layer["layer"], "B": batch,
                              "ci": params["Ni"], "co": params["No"], "hw": params["Ri"], "k": params["Kr"],
                              "stride": params["stride"]}
    source = ROOT / "examples" / "conv2d.sw"
    try:
        started = time.perf_counter()
        op = load(source, params)
        ranked, space = tune_by_model(op, target)
        picked = ranked[0]
        row["ranked_s"] = time.perf_counter() - started
        started = time.perf_counter()
        best = rank(explore(load(source, params), machine), target_name)[0]
        row["exhaustive_s"] = time.perf_counter() - started
    except ScheduleError as error:
        row["pick"] = f"no legal candidate ({str(error).split('(')[-1].rstrip(')')})"
        return row
    row.update(candidates=space.total, lowered=len(space.legal), speedup=row["exhaustive_s"] / row["ranked_s"],
               pick_over_best=picked.estimate.seconds / best.estimate.seconds, pick=picked.candidate.describe())
    return row


def plot(rows: list[dict[str, object]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(str(row["target"]) for row in rows))
    figure, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        timed = [row for row in rows if row["target"] == name and "ranked_s" in row]
        axis.scatter(range(len(timed)), [row["exhaustive_s"] for row in timed], label="every candidate lowered",
                     marker="x")
        axis.scatter(range(len(timed)), [row["ranked_s"] for row in timed], label="ranked before lowering")
        axis.set_yscale("log")
        axis.set_title(f"model tuning per conv layer, {name}")
        axis.set_xlabel("layer x batch")
        axis.set_ylabel("seconds, parse to chosen candidate")
        axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "tuning_speed.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=["sw26010", "host"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()
    shapes = layer_shapes()[: args.layers]
    tasks = [(target, layer, batch) for target in args.targets for layer in shapes for batch in args.batches]
    rows = [measure(*task) for task in tqdm(tasks, desc="tuning layers", unit="layer")]
    summary = []
    for target in args.targets:
        timed = [row for row in rows if row["target"] == target and "ranked_s" in row]
        if timed:
            ranked = [r["ranked_s"] for r in timed]
            summary.append(
                f"{target}: {len(timed)} layer runs; ranked median {statistics.median(ranked):.2f} s"
                f" (worst {max(ranked):.2f}), every candidate lowered median "
                f"{statistics.median(r['exhaustive_s'] for r in timed):.2f} s; pick over the exhaustive pick: mean "
                f"{statistics.mean(r['pick_over_best'] for r in timed):.4f}, worst "
                f"{max(r['pick_over_best'] for r in timed):.4f}")
    print(header())
    print("\n".join(summary))
    write_tables("tuning_speed", FIELDS, rows, "Model tuning: ranked before lowering against every candidate lowered",
                 notes="\n".join(summary), group="target")
    plot(rows)


if __name__ == "__main__":
    main()

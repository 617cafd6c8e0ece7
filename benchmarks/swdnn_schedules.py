"""The model's pick against swDNN's two hand-written implicit convolutions (issue 11; thesis figure 6.7:
swAutoDNN 1.44x swDNN on average over VGG16, ResNet-50 and YOLO layers), on the simulated SW26010.

    python benchmarks/swdnn_schedules.py [--batches 32 128] [--layers N]

Layers: the VGG16, ResNet-50 and YOLOv2 layers of ../shared/workloads/cnn_conv_layers.csv. swDNN's
schedules are fixed candidates of `examples/conv2d.sw` (natural layouts: input [Ri, Ci, Ni, B], the
weight [Kr, Kc, No, Ni] as figure 6.2 has it rather than conv2d.sw's [Kr, Kc, Ni, No]; loops
R_o > C_o blocks > K_r > K_c around the GEMM, the output tile kept in local memory over the taps,
transfers double buffered, channels in blocks of 256 where there are more, as the hand-written code
must to fit local memory):
- algorithm 3, batch-size-aware: one output column per GEMM (M = B);
- algorithm 4, image-size-aware: b_Co output columns per GEMM (M = b_Co x B), with the best b_Co of
  2, 4, ..., 32 for the layer (`algorithm4_bco`; a strong baseline: a hand-written code has one).
Each GEMM is vectorized over M where M >= 128, else over N. A fixed candidate that does not fit is
tried single buffered. swauto's pick is `swauto.compile(target="sw26010")` (model-tuned over the
whole space). All three are timed on the timed simulator; `speedup` is the better hand schedule's
time over the pick's. Writes benchmarks/results/swdnn_schedules.{csv,md,png}.
"""

from __future__ import annotations

import statistics

from common import RESULTS, ROOT, over_layers, workload_layers

from swauto.frontend.check import BoundOperator
from swauto.schedule.candidate import Candidate

NETWORKS = ("vgg16", "resnet50", "yolov2")
FIELDS = ["model", "layer", "B", "ci", "co", "in_hw", "k", "stride", "pad", "algorithm3_ms", "algorithm4_ms",
          "algorithm4_bco", "swauto_ms", "swauto_gflops", "swauto_pct", "speedup", "swauto_pick"]


# conv2d.sw with the weight in its declared (swDNN's) layout: the space the hand schedules are found in.
SWDNN_SW = (ROOT / "examples" / "conv2d.sw").read_text().replace(
    "layout weight any of {[Kr, Kc, Ni, No]}", "layout weight any of {[Kr, Kc, No, Ni]}")


def hand_schedule(op: BoundOperator, columns: int, double_buffer: bool) -> Candidate | None:
    """swDNN's fixed candidate with `columns` output columns per GEMM (see the module docstring), found
    in SWDNN_SW's space: loops that run once stand outermost there, in any order."""
    from swauto.schedule.space import candidates

    batch = op.params["B"]
    wanted = {"cCo": columns, "N": min(256, op.params["No"]), "K": min(256, op.params["Ni"])}
    nest = ["N_outer", "cRo", "cCo_outer", "cKr", "cKc", "K_outer"]
    once = {"N_outer"} if wanted["N"] == op.params["No"] else set()
    once |= {"K_outer"} if wanted["K"] == op.params["Ni"] else set()
    once |= {"cKr", "cKc"} if op.params["Kr"] == op.params["Kc"] == 1 else set()
    for candidate in candidates(op):
        # With 8 input channels or fewer, the kernel loops are split too (taps joining K), and so are
        # the output rows (rows joining M): swDNN's candidate keeps one tap and one row per GEMM, its
        # outer loops those loops.
        splits = dict(candidate.splits)
        whole = {loop: splits.pop(loop) for loop in ("cKr", "cKc", "cRo") if loop in splits}
        if any(factor != 1 for factor in whole.values()):
            continue
        order = [loop.removesuffix("_outer") if loop.removesuffix("_outer") in whole else loop
                 for loop in candidate.order]
        order = [loop for loop in order if loop in nest and loop not in once]
        if splits == wanted and candidate.double_buffer == double_buffer and \
                candidate.vectorize == ("M" if columns * batch >= 128 else "N") and \
                all(list(p) == sorted(p) for _, p in candidate.layouts) and order == sorted(order, key=nest.index):
            return candidate
    return None


def simulated_ms(params: dict[str, int], columns: int) -> float | None:
    import swauto
    from swauto.api import load

    op = load(SWDNN_SW, params)
    for double_buffer in (True, False):
        candidate = hand_schedule(op, columns, double_buffer)
        if candidate is None:
            continue
        try:
            kernel = swauto.compile(SWDNN_SW, params=params, target="sw26010", schedule=candidate)
        except swauto.SwautoError:
            continue
        return 1e3 * kernel.report["simulated_s"]
    return None


def measure(layer: dict[str, str], batch: int) -> dict[str, object]:
    import swauto

    shape = {key: int(layer[key]) for key in ("ci", "co", "in_hw", "k", "stride", "pad")}
    row: dict[str, object] = {"model": layer["model"], "layer": layer["layer"], "B": batch, **shape}
    params = {"B": batch, "Ni": shape["ci"], "No": shape["co"], "Ri": shape["in_hw"], "Ci": shape["in_hw"],
              "Kr": shape["k"], "Kc": shape["k"], "stride": shape["stride"], "pad": shape["pad"]}
    co = (shape["in_hw"] + 2 * shape["pad"] - shape["k"]) // shape["stride"] + 1
    row["algorithm3_ms"] = simulated_ms(params, 1)
    timed = {c: simulated_ms(params, c) for c in (2, 4, 8, 16, 32) if c <= co}
    timed = {c: t for c, t in timed.items() if t is not None}
    if timed:
        row["algorithm4_bco"] = min(timed, key=timed.get)  # type: ignore[arg-type]
        row["algorithm4_ms"] = timed[row["algorithm4_bco"]]
    kernel = swauto.compile(ROOT / "examples" / "conv2d.sw", params=params, target="sw26010")
    seconds = kernel.report["simulated_s"]
    row.update(swauto_ms=1e3 * seconds, swauto_gflops=kernel.report["gflops"],
               swauto_pct=100 * kernel.report["peak_fraction"], swauto_pick=kernel.schedule.describe())
    hand = [t for t in (row["algorithm3_ms"], row.get("algorithm4_ms")) if t is not None]
    if hand:
        row["speedup"] = min(hand) / row["swauto_ms"]  # type: ignore[operator]
    return row


def summary(rows: list[dict[str, object]], batches: list[int]) -> list[str]:
    lines = []
    for batch in batches:
        speedups = [float(r["speedup"]) for r in rows if r["B"] == batch and "speedup" in r]
        if speedups:
            lines.append(f"B={batch}: the model's pick over the better hand schedule on {len(speedups)} layers: "
                         f"mean {statistics.mean(speedups):.2f}x, {min(speedups):.2f}-{max(speedups):.2f}x")
    return lines


def plot(rows: list[dict[str, object]], batches: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(batches), 1, figsize=(11, 3.2 * len(batches)), squeeze=False)
    for axis, batch in zip(axes[:, 0], batches, strict=True):
        chosen = [r for r in rows if r["B"] == batch and "speedup" in r]
        axis.bar(range(len(chosen)), [float(r["speedup"]) for r in chosen])
        axis.axhline(1, color="grey", linewidth=0.8)
        axis.set_xticks(range(len(chosen)), [f"{r['model'][:3]} {r['layer']}" for r in chosen], rotation=90,
                        fontsize=6)
        axis.set_ylabel("speedup over swDNN")
        axis.set_title(f"model-tuned implicit convolution over algorithms 3 / 4, B = {batch} (simulated)")
    figure.tight_layout()
    figure.savefig(RESULTS / "swdnn_schedules.png", dpi=120)


def main() -> None:
    over_layers(__doc__, "swdnn_schedules", "The model's pick against swDNN's hand schedules (figure 6.7)",
                FIELDS, workload_layers(NETWORKS), measure, summary, plot, [32, 128])


if __name__ == "__main__":
    main()

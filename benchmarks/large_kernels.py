"""Listing 6.1's large kernels on the simulated SW26010 (issue 11; thesis figure 6.8: the tuned implicit
convolution at about 78.5% of peak on them, 70% on listing 5.1's 3 x 3 kernels).

    python benchmarks/large_kernels.py [--batches 32 128] [--layers N]

Layers: listing 6.1, B in 32, 128; Ni >= No in 64 ... 512; a K x K kernel, K in 32, 64, 128, 256, over
an image of K + 2 pixels, so the output is 3 x 3 (no padding, stride 1): the weight-gradient shape of
a training step, where C_o cannot be blocked and swDNN's image-size-aware schedule does not apply.
Each is `examples/conv2d.sw`, model-tuned (`swauto.compile(target="sw26010")`) and timed on the timed
simulator; percent of one core group's peak (the thesis' figures are per chip: four core groups on
R_o, the same percentage when the split is even). Writes benchmarks/results/large_kernels.{csv,md,png};
listing 5.1's small kernels are `python benchmarks/algorithms.py --full` (its implicit column).
"""

from __future__ import annotations

import itertools
import statistics
import time

from common import ROOT, box_plot_by_batch, over_layers

FIELDS = ["B", "ni", "no", "k", "ms", "gflops", "pct", "compile_s", "pick", "status"]


def listing_6_1() -> list[dict[str, str]]:
    channels = [(ni, no) for ni, no in itertools.product((64, 128, 256, 384, 512), repeat=2) if ni >= no]
    kernels = (32, 64, 128, 256)
    return [{"ni": str(ni), "no": str(no), "k": str(k)} for (ni, no), k in itertools.product(channels, kernels)]


def measure(layer: dict[str, str], batch: int) -> dict[str, object]:
    import swauto

    k = int(layer["k"])
    row: dict[str, object] = {"B": batch, "ni": int(layer["ni"]), "no": int(layer["no"]), "k": k}
    params = {"B": batch, "Ni": row["ni"], "No": row["no"], "Ri": k + 2, "Ci": k + 2, "Kr": k, "Kc": k, "stride": 1,
              "pad": 0}
    started = time.perf_counter()
    try:
        kernel = swauto.compile(ROOT / "examples" / "conv2d.sw", params=params, target="sw26010")
    except swauto.SwautoError as error:
        row["status"] = str(error).split(";")[0][:100]
        return row
    row.update(ms=1e3 * kernel.report["simulated_s"], gflops=kernel.report["gflops"],
               pct=100 * kernel.report["peak_fraction"], compile_s=time.perf_counter() - started,
               pick=kernel.schedule.describe(), status="ok")
    return row


def summary(rows: list[dict[str, object]], batches: list[int]) -> list[str]:
    lines = []
    for batch in batches:
        pct = [float(r["pct"]) for r in rows if r["B"] == batch and r["status"] == "ok"]
        if pct:
            lines.append(f"B={batch}: {len(pct)} layers, mean {statistics.mean(pct):.1f}% of a core group's peak, "
                         f"median {statistics.median(pct):.1f}%, {min(pct):.1f}-{max(pct):.1f}% (thesis: 78.5%)")
    return lines


def plot(rows: list[dict[str, object]], batches: list[int]) -> None:
    box_plot_by_batch(rows, batches, "pct", "% of one core group's peak",
                      "Listing 6.1: K x K kernels, 3 x 3 outputs (simulated)", "large_kernels")


def main() -> None:
    over_layers(__doc__, "large_kernels", "Listing 6.1: large kernels (figure 6.8)", FIELDS, listing_6_1(), measure,
                summary, plot, [32, 128])


if __name__ == "__main__":
    main()

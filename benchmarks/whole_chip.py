"""The whole SW26010 chip (issue 11; thesis 5.4.1 and chapter 6, whose figures are per chip): four core
groups, the output rows R_o split among them as the thesis does (a host thread per core group, each
running the layer on its own rows; every core group has its own memory controller, so the shares run
independently and the chip takes as long as its slowest share).

    python benchmarks/whole_chip.py [--batches 1 32 128] [--layers N]

Layers: ../shared/workloads/cnn_conv_layers.csv (AlexNet, VGG16, ResNet-50, YOLOv2; `--layers N`: the
first N). R_o is cut into four shares as evenly as possible; each distinct share is compiled from
`examples/conv2d.sw` (model-tuned, `swauto.compile(target="sw26010")`) as a layer of its own with
that many output rows and timed on the timed simulator. A share reads the input rows its output rows
need, without row padding: a middle share reads its neighbours' rows, as the thesis' threads do; the
first and last shares read real rows where the whole layer reads its zero padding (a transfer of the
same size, which the simulator prices the same). The chip's figure counts the whole layer's flops
over the slowest share's time, as a percent of the chip's peak (4 x 742.4 = 2969.6 GFLOPS); beside it,
one core group running the whole layer. Writes benchmarks/results/whole_chip.{csv,md,png}.
"""

from __future__ import annotations

import statistics

from common import ROOT, box_plot_by_batch, over_layers, workload_layers

CORE_GROUPS = 4
FIELDS = ["model", "layer", "B", "ci", "co", "in_hw", "k", "stride", "pad", "ro", "shares", "chip_ms", "chip_gflops",
          "chip_pct", "one_cg_ms", "one_cg_pct", "speedup", "status"]


def shares(rows: int, parts: int = CORE_GROUPS) -> list[int]:
    """`rows` cut into at most `parts` contiguous shares as even as possible (no empty share)."""
    return [rows // parts + (i < rows % parts) for i in range(min(parts, rows))]


def simulated(params: dict[str, int]) -> tuple[float, int]:
    """Seconds on one core group's timed simulator, and flops, of conv2d.sw's model-tuned pick."""
    import swauto

    kernel = swauto.compile(ROOT / "examples" / "conv2d.sw", params=params, target="sw26010")
    return kernel.report["simulated_s"], kernel.report["flops"]


def measure(layer: dict[str, str], batch: int) -> dict[str, object]:
    import swauto
    from swauto.machine import SUNWAY

    k, stride, pad, hw = (int(layer[key]) for key in ("k", "stride", "pad", "in_hw"))
    ro = (hw + 2 * pad - k) // stride + 1
    row: dict[str, object] = {"model": layer["model"], "layer": layer["layer"], "B": batch,
                              **{key: int(layer[key]) for key in ("ci", "co", "in_hw", "k", "stride", "pad")},
                              "ro": ro, "shares": "+".join(map(str, shares(ro)))}
    whole = {"B": batch, "Ni": int(layer["ci"]), "No": int(layer["co"]), "Ri": hw, "Ci": hw, "Kr": k, "Kc": k,
             "stride": stride, "pad": pad}
    try:
        one_cg, flops = simulated(whole)
        # A share of r output rows reads (r - 1) * stride + k input rows, unpadded.
        share_seconds = {r: simulated({**whole, "Ri": (r - 1) * stride + k, "pad_r": 0})[0] for r in set(shares(ro))}
    except swauto.SwautoError as error:
        row["status"] = str(error).split(";")[0][:100]
        return row
    chip = max(share_seconds.values())
    row.update(chip_ms=1e3 * chip, chip_gflops=flops / chip / 1e9,
               chip_pct=100 * flops / chip / (CORE_GROUPS * SUNWAY.peak_flops), one_cg_ms=1e3 * one_cg,
               one_cg_pct=100 * flops / one_cg / SUNWAY.peak_flops, speedup=one_cg / chip, status="ok")
    return row


def summary(rows: list[dict[str, object]], batches: list[int]) -> list[str]:
    lines = []
    for batch in batches:
        ok = [r for r in rows if r["B"] == batch and r["status"] == "ok"]
        if not ok:
            continue
        chip = statistics.median(float(r["chip_pct"]) for r in ok)
        one = statistics.median(float(r["one_cg_pct"]) for r in ok)
        speedups = [float(r["speedup"]) for r in ok]
        lines.append(f"B={batch}: {len(ok)} layers; the chip median {chip:.1f}% of 2969.6 GFLOPS (one core group "
                     f"on the whole layer: median {one:.1f}% of 742.4); four core groups "
                     f"{min(speedups):.2f}-{max(speedups):.2f}x one")
    return lines


def plot(rows: list[dict[str, object]], batches: list[int]) -> None:
    box_plot_by_batch(rows, batches, "chip_pct", "% of the chip's 2969.6 GFLOPS",
                      "Implicit convolution on the whole simulated SW26010 (R_o over 4 core groups)", "whole_chip")


def main() -> None:
    over_layers(__doc__, "whole_chip", "The whole SW26010: R_o over four core groups (issue 11)",
                FIELDS, workload_layers(None), measure, summary, plot, [1, 32, 128])


if __name__ == "__main__":
    main()

"""Strided convolutions at batch 1 (issue 11: the image-size-aware form at stride 2): every stride-2
layer of ResNet-18, MobileNetV2 and Inception-v3 (benchmarks/workloads/networks.csv, dense ones), on
both targets.

    python benchmarks/stride2.py [--repeat 9] [--threads 1]

`examples/conv2d.sw` as written, model-tuned (`swauto.compile(..., tuner="model")`):
- SW26010: the pick's simulated time (the timed simulator's timing-only mode) and its percent of a
  core group's peak, with its output columns and rows per GEMM (M = rows x S x B; S = 1 is the
  batch-size-aware form, algorithm 3; rows join M only where a row gives M <= 16); beside it the same
  layer as a network runs it with its bias and ReLU (`examples/conv2d_bias_relu.sw`, which overwrites
  its output instead of adding into it: the output is never read), the percent counting the
  convolution's flops; and for both the ceiling the memory sets (`*_bound_pct`: every tensor moved
  once, of the input the pixels some output reads, the output twice where it is added into, at the
  best bandwidth of the machine's measured DMA table): a 3-channel first layer computes little per byte;
- host: the median of `--repeat` calls against PyTorch's conv2d (oneDNN) on `--threads` threads,
  swauto on arrays already in its layouts (`Kernel.run_arranged`), PyTorch on NCHW, and the percent
  of this machine's measured FMA peak.
Prints the machine and the date; writes benchmarks/results/stride2.{csv,md}.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from common import ROOT, conv_example, header, network_layers, steady_allocator, write_tables

import swauto
from swauto.models.layers import arranged
from swauto.tuner.measure import median_seconds

FIELDS = ["model", "layer", "ci", "co", "in_hw", "kr", "kc", "sw_columns", "sw_rows", "sw_peak_pct", "sw_bound_pct",
          "sw_overwriting_peak_pct", "sw_overwriting_bound_pct", "sw_candidate", "host_gflops", "torch_gflops",
          "host_vs_torch", "host_peak_pct", "host_candidate"]


def strided_layers() -> list[dict[str, str]]:
    seen, chosen = set(), []
    for row in network_layers():
        shape = tuple(row[k] for k in ("ci", "co", "in_hw", "kr", "kc", "pad_r", "pad_c"))
        if row["stride"] == "2" and row["groups"] == "1" and shape not in seen:
            seen.add(shape)
            chosen.append(row)
    return chosen


def measure(layer: dict[str, str], threads: int, repeat: int) -> dict[str, object]:
    import torch

    from swauto import targets
    from swauto.backends.sw26010.timing import time_module

    source = ROOT / "examples" / "conv2d.sw"
    _, params = conv_example(layer, 1)  # a dense layer (`strided_layers`)
    row: dict[str, object] = {k: layer[k] for k in ("model", "layer", "ci", "co", "in_hw", "kr", "kc")}
    machine, peak = targets.get("sw26010").machine(), targets.get("sw26010").peak_flops(1)
    sw = swauto.compile(source, params, target="sw26010")
    flops = sw.report["flops"]  # the convolution's
    seconds = time_module(sw.module, machine).seconds
    overwriting = swauto.compile(ROOT / "examples" / "conv2d_bias_relu.sw", params, target="sw26010")
    overwriting_seconds = time_module(overwriting.module, machine).seconds
    nbytes = {t.name: 4 * math.prod(t.shape) for t in sw.module.tensors}
    # Of the input, only the rows and columns some output reads (a 1 x 1 kernel at stride 2 reads a quarter).
    ci, co, hw, kr, kc = (int(layer[k]) for k in ("ci", "co", "in_hw", "kr", "kc"))
    out_rows, out_columns, *_ = next(t.shape for t in sw.module.tensors if t.name == "output")
    stride = params["stride"]
    rows = {r * stride + k - params["pad_r"] for r in range(out_rows) for k in range(kr)} & set(range(hw))
    columns = {c * stride + k - params["pad_c"] for c in range(out_columns) for k in range(kc)} & set(range(hw))
    nbytes["input"] = 4 * ci * len(rows) * len(columns)
    fastest = max(machine.dma_measured_mbps) * 1e6

    def bound(moved: int) -> float:
        return round(min(100.0, 100 * flops / (moved / fastest) / peak), 1)

    splits = dict(sw.schedule.splits)
    row.update(sw_columns=splits["cCo"], sw_rows=splits.get("cRo", 1),
               sw_peak_pct=round(100 * flops / seconds / peak, 1),
               sw_bound_pct=bound(sum(nbytes.values()) + nbytes["output"]),
               sw_overwriting_peak_pct=round(100 * flops / overwriting_seconds / peak, 1),
               sw_overwriting_bound_pct=bound(sum(nbytes.values())),
               sw_candidate=sw.schedule.describe())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, ci, hw, hw), dtype=np.float32)  # NCHW, as PyTorch takes it
    w = rng.standard_normal((co, ci, kr, kc), dtype=np.float32)  # OIHW
    declared = {"input": x.transpose(2, 3, 1, 0), "weight": w.transpose(2, 3, 0, 1)}

    host = swauto.compile(source, params, target="host", threads=threads)
    ready = arranged(host, declared)
    ready["output"] = np.zeros(next(t.shape for t in host.module.tensors if t.name == "output"), np.float32)
    ours = median_seconds(lambda: host.run_arranged(**ready), repeat)
    torch.set_num_threads(threads)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    padding = (int(layer["pad_r"]), int(layer["pad_c"]))
    with torch.no_grad():
        theirs = median_seconds(lambda: torch.nn.functional.conv2d(tx, tw, stride=2, padding=padding), repeat)
    flops = host.report["flops"]
    row.update(host_gflops=round(flops / ours / 1e9, 1), torch_gflops=round(flops / theirs / 1e9, 1),
               host_vs_torch=round(theirs / ours, 3),
               host_peak_pct=round(100 * flops / ours / targets.get("host").peak_flops(threads), 1),
               host_candidate=host.schedule.describe())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    steady_allocator()
    import torch
    from tqdm import tqdm

    rows = []
    for layer in tqdm(strided_layers(), desc="stride-2 layers", unit="layer"):
        rows.append(measure(layer, args.threads, args.repeat))
        tqdm.write(f"{layer['model']:12} {layer['layer']:26} SW {rows[-1]['sw_peak_pct']:5.1f}% of peak "
                   f"(S = {rows[-1]['sw_columns']}; overwriting {rows[-1]['sw_overwriting_peak_pct']:5.1f}%); "
                   f"host {rows[-1]['host_vs_torch']:.2f}x PyTorch")
    def spread(column: str) -> str:
        ratios = [float(r[column]) for r in rows]
        return (f"{min(ratios):.2f}-{max(ratios):.2f}x PyTorch, geometric mean "
                f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x, {sum(r < 0.9 for r in ratios)} below 0.9x")

    notes = (f"{len(rows)} layers, B = 1: SW26010 {min(float(r['sw_peak_pct']) for r in rows):.1f}-"
             f"{max(float(r['sw_peak_pct']) for r in rows):.1f}% of a core group's peak (overwriting, with bias and "
             f"ReLU: {min(float(r['sw_overwriting_peak_pct']) for r in rows):.1f}-"
             f"{max(float(r['sw_overwriting_peak_pct']) for r in rows):.1f}%); host, {args.threads} "
             f"thread(s): {spread('host_vs_torch')}")
    print(header() + f"  torch {torch.__version__}  medians of {args.repeat}")
    print(notes)
    write_tables("stride2", FIELDS, rows, "Stride-2 layers at batch 1 on both targets", notes=notes)


if __name__ == "__main__":
    main()

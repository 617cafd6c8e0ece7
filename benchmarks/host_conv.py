"""swauto's host convolution against PyTorch's conv2d (oneDNN), side by side.

    python benchmarks/host_conv.py [--batch 1 32] [--threads 1 2] [--kernel 3] [--models resnet50 vgg16]
                                   [--all] [--repeat 5] [--limit N] [--implicit-only] [--weights-per-call]
                                   [--name host_conv]

The operator is examples/conv2d.sw; for a 3 x 3 layer at stride 1, `swauto.choose` takes it,
examples/conv2d_winograd.sw (F(2x2, 3x3)) or examples/conv2d_winograd4.sw (F(4x4, 3x3)), whichever
the host model predicts fastest (`algorithm`; with `--implicit-only`, conv2d.sw always). Each computes
what PyTorch's conv2d does, output = conv(input, weight) (`overwriting`: the examples add into output,
which reads it too). Layers come from ../shared/workloads/cnn_conv_layers.csv
(default: the 3x3 layers of ResNet50 and VGG16); `--all` takes every distinct shape of that file and of
benchmarks/workloads/networks.csv (ResNet-18, MobileNetV2, Inception-v3: 121 shapes; MobileNetV2's
depthwise layers from examples/conv2d_depthwise.sw, against PyTorch's grouped conv2d). For each layer,
batch size and thread count (the most threads: swauto runs a call on one where its model predicts it too
small to share, `swauto_threads`): the median of `--repeat` calls of each implementation (taking turns),
GFLOPS, percent of the FMA peak that many cores gave in the same turns (`host_model.peak_probe`: on a
shared machine, not always the peak calibration measured; both count every tap's flops, the padding's
too, which neither computes: on small padded images either may pass 100%), the ratio swauto / PyTorch
(this percent and the ratio are medians of each turn's own: `common.paired_ratio`),
and the tuning and compile time (a layer whose probe read well below the calibrated peak of its cores,
another tenant holding one, is measured again: `common.probed_run`, `runs`). swauto runs on arrays
already in the layouts its kernel wants
(`Kernel.run_arranged`): a framework would hand them over that way, and PyTorch likewise gets its own
NCHW arrays; the conversion swauto would need from NCHW is timed apart (`layout_s`). The weights are
constants (`swauto.compile(constants=["weight"])`), as in inference: what depends on them alone
(Winograd's filter transforms) runs once, in `Kernel.prepare`, timed apart (`prepare_s`), and the
algorithm is chosen on a call's time after it; with `--weights-per-call`, every call transforms them
again. PyTorch's plain conv2d is its fastest path here: its inference path with weights prepared once
(`torch.jit.freeze`, `optimize_for_inference`: a constant MKLDNN weight) ran 7 - 11% slower on three
VGG16 and ResNet layers.
Prints the machine and the date; writes benchmarks/results/host_conv.{csv,md,png} (`--name` replaces
"host_conv", so that the runs of each batch size keep their own tables).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
from common import (
    RESULTS,
    conv_example,
    csv_rows,
    header,
    layer_shapes,
    paired_ratio,
    probed_run,
    steady_allocator,
    turn_seconds,
    write_tables,
    written_out,
)

import swauto
from swauto.models.layers import arranged

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
EXAMPLES = ROOT / "examples"
FIELDS = ["model", "layer", "batch", "threads", "swauto_threads", "gflop", "algorithm", "swauto_gflops", "torch_gflops",
          "swauto_vs_torch", "peak_gflops", "swauto_peak_pct", "layout_s", "prepare_s", "tuning_s", "candidate", "runs"]


def layers(path: Path, kernel: int | None, models: list[str] | None) -> list[dict[str, str]]:
    """The workload list's rows of `models` with `kernel` x `kernel` kernels, `written_out`."""
    return [written_out(r) for r in csv_rows(path)
            if (kernel is None or int(r["k"]) == kernel) and (not models or r["model"] in models)]


def winograd_applies(layer: dict[str, str]) -> bool:
    """Whether the Winograd convolutions (examples/conv2d_winograd*.sw) compute `layer`: dense, 3 x 3,
    stride 1."""
    return layer["groups"] == "1" and layer["kr"] == layer["kc"] == "3" and layer["stride"] == "1"


# The statements of the convolution examples that add into their output, and what overwrites it instead.
_OVERWRITING = {"C += output[": "C = output[", "Z += output[": "Z = output[",
                "crop: add(M = B, N = No, X = Y[r, c], Y = output[r, c], Z = output[r, c])":
                "crop: copy(M = B, N = No, X = Y[r, c], Z = output[r, c])"}


def overwriting(example: str) -> str:
    """The source of a convolution example (a file name in examples/) whose last statement overwrites
    its output instead of adding into it: it computes what PyTorch's conv2d computes, and never reads
    the output (a 1 x 1 layer of 24 input channels, MobileNetV2 block1.1.expand at B = 1: 0.70 ms
    adding into it, 0.58 overwriting it, PyTorch 0.57; in turns, medians of 9)."""
    source = (EXAMPLES / example).read_text()
    rewritten = source
    for adding, overwritten in _OVERWRITING.items():
        rewritten = rewritten.replace(adding, overwritten)
    if rewritten == source:
        raise ValueError(f"examples/{example} has no statement that adds into its output")
    return rewritten


def measure(layer: dict[str, str], batch: int, threads: int, repeat: int, choose: bool,
            constant_weights: bool = True) -> dict[str, object]:
    import torch

    from swauto.tuner.host_model import peak_probe

    found = conv_example(layer, batch)
    assert found is not None, f"{layer['model']} {layer['layer']}: {layer['groups']} groups are not covered"
    example, params = found
    ci, co, hw, kr, kc, stride, pad_r, pad_c, groups = (
        int(layer[key]) for key in ("ci", "co", "in_hw", "kr", "kc", "stride", "pad_r", "pad_c", "groups"))
    constants = ["weight"] if constant_weights else []
    started = time.perf_counter()
    if choose and winograd_applies(layer):
        algorithms = [overwriting(name) for name in (example, "conv2d_winograd.sw", "conv2d_winograd4.sw")]
        kernel = swauto.choose(algorithms, params, target="host", threads=threads, constants=constants)
    else:
        kernel = swauto.compile(overwriting(example), params, target="host", threads=threads, constants=constants)
    tuning = time.perf_counter() - started
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, ci, hw, hw), dtype=np.float32)  # NCHW, as PyTorch takes it
    w = rng.standard_normal((co, ci // groups, kr, kc), dtype=np.float32)  # OIHW
    started = time.perf_counter()
    # The declared layouts: input[Ri, Ci, Ni, B]; weight[Kr, Kc, No, Ni], or [Kr, Kc, C] for depthwise.
    weight = w.transpose(2, 3, 0, 1) if groups == 1 else w[:, 0].transpose(1, 2, 0)
    ready = arranged(kernel, {"input": x.transpose(2, 3, 1, 0), **({} if constant_weights else {"weight": weight})})
    layout_s = time.perf_counter() - started
    started = time.perf_counter()
    run = kernel.prepare(weight=np.ascontiguousarray(weight)) if constant_weights else kernel
    prepare_s = time.perf_counter() - started
    out_shape = next(t.shape for t in kernel.module.tensors if t.name == "output")
    ready["output"] = np.zeros(out_shape, np.float32)
    torch.set_num_threads(threads)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    probe, probe_flops = peak_probe(threads)
    with torch.no_grad():  # they take turns: a burst of load on a shared machine hits all alike
        turns = turn_seconds(lambda: run.run_arranged(**ready),
                             lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=(pad_r, pad_c),
                                                                groups=groups),
                             probe, repeat=repeat)
    ours, theirs = (statistics.median(samples) for samples in turns[:2])
    # Every tap's flops, the padding's too, whichever algorithm runs (Winograd's own count is lower).
    flops = 2 * math.prod(out_shape) * (ci // groups) * kr * kc
    return {
        "model": layer["model"], "layer": layer["layer"], "batch": batch, "threads": threads,
        "swauto_threads": kernel.threads,
        "gflop": round(flops / 1e9, 3), "algorithm": kernel.operator.name,
        "swauto_gflops": round(flops / ours / 1e9, 1),
        "torch_gflops": round(flops / theirs / 1e9, 1), "swauto_vs_torch": round(paired_ratio(turns[1], turns[0]), 3),
        "peak_gflops": round(probe_flops / statistics.median(turns[2]) / 1e9, 1),
        "swauto_peak_pct": round(100 * flops / probe_flops * paired_ratio(turns[2], turns[0]), 1),
        "layout_s": round(layout_s, 4), "prepare_s": round(prepare_s, 4), "tuning_s": round(tuning, 2),
        "candidate": kernel.schedule.describe(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--kernel", type=int, default=3, help="only layers with this kernel size (0: all)")
    parser.add_argument("--models", nargs="*", default=["resnet50", "vgg16"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--all", action="store_true", help="every distinct shape of both layer files")
    parser.add_argument("--limit", type=int, default=0, help="at most this many layers (0: all)")
    parser.add_argument("--implicit-only", action="store_true",
                        help="the implicit convolution everywhere (no choice of Winograd's)")
    parser.add_argument("--weights-per-call", action="store_true",
                        help="transform the weights at every call (not once, as constants)")
    parser.add_argument("--name", default="host_conv", help="the results files' name")
    args = parser.parse_args()
    steady_allocator()
    import torch
    from tqdm import tqdm

    chosen = (layer_shapes() if args.all else layers(LAYERS, args.kernel or None, args.models))[: args.limit or None]
    print(header() + f"  torch {torch.__version__}  medians of {args.repeat}")
    rows = []
    jobs = [(layer, b, t) for layer in chosen for b in args.batch for t in args.threads]
    for layer, batch, threads in tqdm(jobs, desc="layers", unit=" runs"):
        row = probed_run(lambda layer=layer, batch=batch, threads=threads: measure(
            layer, batch, threads, args.repeat, not args.implicit_only, not args.weights_per_call), threads)
        rows.append(row)
        tqdm.write(f"{row['model']:9} {row['layer']:10} B={batch:<3} t={threads}  swauto {row['swauto_gflops']:7.1f}  "
                   f"torch {row['torch_gflops']:7.1f}  ratio {row['swauto_vs_torch']:.2f}  {row['algorithm']} "
                   f"({row['candidate']})")
    summary = []
    for batch in args.batch:
        for threads in args.threads:
            runs = [r for r in rows if r["batch"] == batch and r["threads"] == threads]
            ratios = [r["swauto_vs_torch"] for r in runs]
            geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            below = sorted((r["swauto_vs_torch"], r["model"], r["layer"]) for r in runs if r["swauto_vs_torch"] < 0.9)
            summary.append(f"B={batch} threads={threads}: geometric mean swauto / PyTorch = {geomean:.3f} over "
                           f"{len(ratios)} layers, {len(below)} below 0.9x"
                           + "".join(f"; {model} {layer} {ratio:.2f}x" for ratio, model, layer in below[:5])
                           + f"; swauto at {statistics.median(r['swauto_peak_pct'] for r in runs):.0f}% of the peak "
                             "measured in the same turns (median)")
            print(summary[-1])
    write_tables(args.name, FIELDS, rows, "conv2d on the host: swauto against PyTorch", "  \n".join(summary))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(10, 4))
    labels = [f"{r['layer']} B{r['batch']} t{r['threads']}" for r in rows]
    axis.bar(range(len(rows)), [r["swauto_vs_torch"] for r in rows])
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(rows)), labels, rotation=70, fontsize=7)
    axis.set_ylabel("swauto / PyTorch (higher is faster)")
    axis.set_title("conv2d on the host")
    figure.tight_layout()
    figure.savefig(RESULTS / f"{args.name}.png", dpi=120)


if __name__ == "__main__":
    main()

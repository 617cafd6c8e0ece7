"""Whole ONNX networks (issue 13): ResNet-18 and MobileNetV2 (`swauto.models.zoo`, torchvision's shapes,
random weights, 224 x 224) run end to end by `swauto.Model` on the host, against onnxruntime running
the same model and PyTorch (where installed) running its nodes in eager mode, side by side in one run.

    python benchmarks/onnx_networks.py [--batches 1 8] [--threads 1 2] [--repeat 5]

Per network, batch and thread count: the compile time (model tuning and code generation of each distinct
layer, a fresh cache folder but for the host's calibration), the median of `--repeat` end-to-end calls of
each, the ratio, swauto's time with every 3 x 3 layer on the implicit convolution (timed in turns with
the model: what choosing Winograd's forms gave) and how many layers took one of them, and the largest
error of the output against onnxruntime's relative to its largest value; and, from `swauto.tune_model`,
the sum over the nodes of the layers' own kernel times (arrays already in their layouts) against
onnxruntime's nodes run alone, which tells the kernels apart from what `Model` adds between them (layout
conversions, NumPy's bias). PyTorch runs the graph node by node with `torch.nn.functional` on the ONNX
graph's weights (`torch_runner`), as a hand-written eager model would.
Prints the machine and the date; writes benchmarks/results/onnx_networks.{csv,md}.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from common import header, steady_allocator, write_tables
from common import median_seconds as in_turns

from swauto.tuner.measure import median_seconds

SETTLE_S = 1.0  # after another runtime ran: its spinning threads go to sleep
FIELDS = ["network", "batch", "threads", "compile_s", "swauto_ms", "implicit_only_ms", "winograd_layers",
          "onnxruntime_ms", "onnxruntime_vs_swauto",
          "torch_ms", "torch_vs_swauto", "error", "kernels_ms", "onnxruntime_nodes_ms", "layers", "nodes"]


def torch_runner(graph):
    """A function running `graph` (a `swauto.models.Graph`) node by node with torch.nn.functional, or None
    without PyTorch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    weights = {name: torch.from_numpy(np.array(value)) for name, value in graph.constants.items()}

    def conv(node, v):
        pads, strides = node.attribute("pads", [0] * 4), node.attribute("strides", [1, 1])
        bias = v[node.inputs[2]] if len(node.inputs) > 2 else None
        return F.conv2d(v[node.inputs[0]], v[node.inputs[1]], bias, strides, pads[:2], 1, node.attribute("group", 1))

    def batchnorm(node, v):
        x, scale, bias, mean, var = (v[name] for name in node.inputs)
        return F.batch_norm(x, mean, var, scale, bias, False, 0.0, node.attribute("epsilon", 1e-5))

    ops = {
        "Conv": conv, "BatchNormalization": batchnorm,
        "Relu": lambda n, v: F.relu(v[n.inputs[0]]),
        "Clip": lambda n, v: torch.clamp(v[n.inputs[0]], float(v[n.inputs[1]]), float(v[n.inputs[2]])),
        "Add": lambda n, v: v[n.inputs[0]] + v[n.inputs[1]],
        "MaxPool": lambda n, v: F.max_pool2d(v[n.inputs[0]], n.attribute("kernel_shape"), n.attribute("strides"),
                                             n.attribute("pads", [0] * 4)[:2]),
        "GlobalAveragePool": lambda n, v: F.adaptive_avg_pool2d(v[n.inputs[0]], 1),
        "Flatten": lambda n, v: torch.flatten(v[n.inputs[0]], 1),
        "Gemm": lambda n, v: F.linear(v[n.inputs[0]], v[n.inputs[1]], v[n.inputs[2]]),
    }

    def run(x: np.ndarray) -> np.ndarray:
        values = {**weights, graph.inputs[0]: torch.from_numpy(x)}
        with torch.no_grad():
            for node in graph.nodes:
                for part in node.parts or (node,):  # a FusedConv: its Conv, Add and ReLU one by one
                    values[part.outputs[0]] = ops[part.op](part, values)
        return values[graph.outputs[0]].numpy()

    return run


def measure(network: str, batch: int, threads: int, repeat: int) -> dict[str, object]:
    import onnxruntime

    import swauto
    from swauto.models import zoo

    proto = getattr(zoo, network)()
    started = time.perf_counter()
    model = swauto.Model(proto, batch=batch, threads=threads)
    compile_s = time.perf_counter() - started
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224), dtype=np.float32)
    # Each runtime is timed alone: onnxruntime's and OpenMP's idle threads spin for a while after a
    # run, taking cores from whatever runs next (swauto was 1.5x slower timed right after onnxruntime).
    ours = model(input=x)["fc"]
    # The same network with every 3 x 3 layer on the implicit convolution (no Winograd to choose), timed
    # in turns with the model: what the choice of Winograd's forms gives.
    implicit = swauto.Model(proto, batch=batch, threads=threads, winograd=False)
    swauto_s, implicit_s = in_turns(lambda: model(input=x), lambda: implicit(input=x), repeat=repeat)
    swauto_ms, implicit_ms = 1e3 * swauto_s, 1e3 * implicit_s
    winograd_layers = sum(model.kernels[layer.key].operator.name.startswith("conv2d_winograd")
                          for layer in model.layers if layer.alternatives)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"input": x})[0]
    onnxruntime_ms = 1e3 * median_seconds(lambda: session.run(None, {"input": x}), repeat)
    time.sleep(SETTLE_S)
    tuning = swauto.tune_model(proto, batch=batch, threads=threads, repeat=repeat)
    time.sleep(SETTLE_S)
    torch_run = torch_runner(model.graph)
    torch_ms = None
    if torch_run is not None:
        import torch

        torch.set_num_threads(threads)
        assert np.abs(torch_run(x) - theirs).max() <= 1e-4 * np.abs(theirs).max()  # the same network
        torch_ms = 1e3 * median_seconds(lambda: torch_run(x), repeat)
        time.sleep(SETTLE_S)
    return {"network": network, "batch": batch, "threads": threads, "compile_s": round(compile_s, 2),
            "swauto_ms": round(swauto_ms, 2), "implicit_only_ms": round(implicit_ms, 2),
            "winograd_layers": winograd_layers, "onnxruntime_ms": round(onnxruntime_ms, 2),
            "onnxruntime_vs_swauto": round(onnxruntime_ms / swauto_ms, 3),
            "torch_ms": torch_ms and round(torch_ms, 2), "torch_vs_swauto": torch_ms and round(torch_ms / swauto_ms, 3),
            "error": float(np.abs(ours - theirs).max() / np.abs(theirs).max()),
            "kernels_ms": round(1e3 * tuning.total_seconds(), 2),
            "onnxruntime_nodes_ms": round(1e3 * tuning.total_seconds("onnxruntime_s"), 2),
            "layers": len(tuning.layers), "nodes": len(model.layers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    steady_allocator()
    from tqdm import tqdm

    os.environ["SWAUTO_CACHE_DIR"] = tempfile.mkdtemp(prefix="swauto-onnx-")  # compile times from scratch
    from swauto.tuner import host_model

    host_model.machine()  # the calibration (a few seconds) is not part of a compile time
    runs = [(n, b, t) for n in args.networks for b in args.batches for t in args.threads]
    rows = []
    for network, batch, threads in tqdm(runs, desc="networks", unit=" runs"):
        rows.append(measure(network, batch, threads, args.repeat))
        tqdm.write(f"{network:13} B={batch} T={threads}: swauto {rows[-1]['swauto_ms']} ms, onnxruntime "
                   f"{rows[-1]['onnxruntime_ms']} ms, PyTorch {rows[-1]['torch_ms']} ms, error {rows[-1]['error']:.1e}")
    print(header())
    write_tables("onnx_networks", FIELDS, rows, "Whole ONNX networks on the host: swauto.Model against onnxruntime")


if __name__ == "__main__":
    main()

"""The host model's price of each convolution algorithm against its measured time, whole and statement by
statement: what `swauto.choose` weighs when a network's 3 x 3 layer may run on Winograd's forms.

    python benchmarks/conv_algorithms_priced.py [--layers B,Ni,No,HW ...] [--threads 1] [--repeat 9]

Per layer (a 3 x 3 convolution at stride 1, padded by 1, and a ReLU, as `swauto.Model` compiles it: the
activations pinned channels innermost, the weights as constants, prepared once): `conv2d_relu.sw`,
`conv2d_winograd_relu.sw` (F(2x2, 3x3)) and `conv2d_winograd4_relu.sw` (F(4x4, 3x3)), each the model's
pick, timed in turns (medians of `--repeat` calls of the prepared kernel on arranged arrays) beside the
model's price. Then each kernel's statements alone (its top-level nests grouped by the compute statement
their buffers belong to), each compiled and timed in turns the same way on the kernel's own arrays,
beside the model's price of that statement alone: which statements the model prices wrong. Prints the
machine and the date; writes benchmarks/results/conv_algorithms_priced.{csv,md}.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
from common import header, median_seconds, steady_allocator, write_tables

ALGORITHMS = ("conv2d_relu", "conv2d_winograd_relu", "conv2d_winograd4_relu")
CHANNELS_INNERMOST = {"input": (0, 1, 3, 2), "output": (0, 1, 3, 2)}  # the model's activation form
FIELDS = ["layer", "threads", "algorithm", "statement", "primitives", "measured_ms", "priced_ms",
          "priced_over_measured"]


def statements(module):
    """The kernel's top-level statements grouped by the compute statement whose buffers they use
    (`LocalBuffer.statement`: a nest and the transfers placed around it; 'other' for those that use
    none), each as a module of its own with every allocation."""
    from swauto.ir.nodes import Alloc, Call, Dma, Seq, Zero, seq
    from swauto.ir.visitor import walk

    owner = {buffer.name: buffer.statement for buffer in module.buffers}
    body = module.body.stmts if isinstance(module.body, Seq) else (module.body,)
    allocs = [stmt for stmt in body if isinstance(stmt, Alloc)]
    groups: dict[str, list] = {}
    for stmt in body:
        if isinstance(stmt, Alloc):
            continue
        names = set()
        for node, _ in walk(stmt):
            if isinstance(node, Dma | Zero):
                names.add(node.buffer.name)
            elif isinstance(node, Call):
                names |= {access.name for _, access in node.operands}
        used = sorted({owner[name] for name in names if name in owner})
        groups.setdefault(str(used[0]) if used else "other", []).append(stmt)
    for index, stmts in groups.items():
        primitives = sorted({node.primitive for stmt in stmts for node, _ in walk(stmt) if isinstance(node, Call)})
        yield index, ",".join(primitives), replace(module, body=seq(*allocs, *stmts))


def measure(layer: tuple[int, int, int, int], threads: int, repeat: int) -> list[dict]:
    import swauto
    from swauto.backends.host import compile_module
    from swauto.models.layers import arranged, library
    from swauto.tuner import host_model

    batch, ni, no, hw = layer
    params = {"B": batch, "Ni": ni, "No": no, "Ri": hw, "Ci": hw, "pad_r": 1, "pad_c": 1}
    name = f"B{batch} {ni}->{no} {hw}^2"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((hw, hw, ni, batch), dtype=np.float32)
    w = rng.standard_normal((3, 3, no, ni), dtype=np.float32)
    kernels = []
    for algorithm in ALGORITHMS:
        kernel = swauto.compile(library(f"{algorithm}.sw"), params, threads=threads, constants=["weight"],
                                layouts=CHANNELS_INNERMOST)
        prepared = kernel.prepare(weight=w)
        ready = arranged(kernel, {"input": x, "output": np.zeros(kernel.shapes["output"], np.float32)})
        kernels.append((algorithm, kernel, prepared, ready))
    seconds = median_seconds(*[lambda p=prepared, r=ready: p.run_arranged(**r) for _, _, prepared, r in kernels],
                             repeat=repeat)
    rows = []
    machine = host_model.machine()
    for (algorithm, kernel, _, _), measured in zip(kernels, seconds, strict=True):
        priced = kernel.report["predicted_s"]
        rows.append({"layer": name, "threads": kernel.threads, "algorithm": algorithm, "statement": "all",
                     "measured_ms": round(measured * 1e3, 3), "priced_ms": round(priced * 1e3, 3),
                     "priced_over_measured": round(priced / measured, 2)})
        # The kernel's own arrays (locals too), as its program takes them.
        arrays = {tensor.name: np.ones(tensor.shape, np.float32) for tensor in kernel.module.tensors}
        parts = [(index, primitives, part, compile_module(part, knobs=kernel.program.knobs))
                 for index, primitives, part in statements(kernel.module)]
        timed = median_seconds(*[lambda p=program, a=arrays, t=kernel.threads: p.run(a, threads=t)
                                 for *_, program in parts], repeat=repeat)
        for (index, primitives, part, _), measured_part in zip(parts, timed, strict=True):
            priced_part = host_model.estimate(part, kernel.threads, machine).seconds
            rows.append({"layer": name, "threads": kernel.threads, "algorithm": algorithm, "statement": index,
                         "primitives": primitives, "measured_ms": round(measured_part * 1e3, 3),
                         "priced_ms": round(priced_part * 1e3, 3),
                         "priced_over_measured": round(priced_part / measured_part, 2) if measured_part else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", nargs="+", default=["8,128,128,28", "8,64,64,56", "1,256,256,14"],
                        help="B,Ni,No,HW of each layer")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    steady_allocator()
    rows = []
    for text in args.layers:
        layer = tuple(int(part) for part in text.split(","))
        measured = measure(layer, args.threads, args.repeat)  # type: ignore[arg-type]
        rows += measured
        print("\n".join(f"{r['layer']:18} {r['algorithm']:22} {str(r['statement']):4} {r.get('primitives', ''):24} "
                        f"measured {r['measured_ms']:8.3f} ms  priced {r['priced_ms']:8.3f}" for r in measured))
    print(header())
    write_tables("conv_algorithms_priced", FIELDS, rows, "The host model's price of each convolution algorithm "
                 "against its time, whole and per statement")


if __name__ == "__main__":
    main()

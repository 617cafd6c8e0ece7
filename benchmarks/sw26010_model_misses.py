"""Where the SW26010 model misorders one conv layer: its top candidates and the simulator's, each with
the model's figures (transfers, compute, prologue, total) and the timed simulator's (time, bytes, blocks,
requests, the memory system's service time), side by side.

    python benchmarks/sw26010_model_misses.py resnet50/res2_3x3 --batch 128 [--top 5]

The layer is a `model/layer` of ../shared/workloads/cnn_conv_layers.csv or of
benchmarks/workloads/networks.csv (ResNet-18, MobileNetV2, Inception-v3: `inceptionv3/Mixed_6a.branch3x3dbl_3`),
compiled from examples/conv2d.sw; every legal candidate is ranked by the model and timed on the timed simulator
(about a minute for 1500 candidates). Prints; writes nothing.
"""

from __future__ import annotations

import argparse

from common import ROOT, conv_example, conv_layers, header
from tqdm import tqdm


def main() -> None:
    from swauto.api import load
    from swauto.backends.sw26010.timing import time_module
    from swauto.machine import SUNWAY
    from swauto.pipeline import before_double_buffering
    from swauto.tuner import sw26010_model
    from swauto.tuner.model_tuner import rank
    from swauto.tuner.space import explore

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layer", help="model/layer of the workload list or of benchmarks/workloads/networks.csv")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    found = [conv_example(row, args.batch) for row in conv_layers()
             if f"{row['model']}/{row['layer']}" == args.layer and row["groups"] == "1"]
    if not found:
        parser.error(f"no dense layer {args.layer} in the workload list or networks.csv")
    example, params = found[0]
    op = load(ROOT / "examples" / example, params)
    ranked = rank(explore(op, SUNWAY), "sw26010")
    rows = []
    for number, entry in enumerate(tqdm(ranked, desc="timing candidates", unit="candidate")):
        final = entry.stages[-1][1]
        doubled = any(name == "double_buffer" for name, _ in entry.stages)
        model = sw26010_model.estimate(before_double_buffering(entry.stages), final, doubled, SUNWAY)
        rows.append((number, entry, model, time_module(final, SUNWAY)))
    best = min(timing.seconds for *_, timing in rows)
    print(header())
    print(f"{args.layer} at B = {args.batch}: {len(rows)} legal candidates; the model's pick is "
          f"{rows[0][3].seconds / best:.4f} of the simulator's best")

    def show(row: tuple) -> None:
        number, entry, model, timing = row
        stats = timing.stats
        print(f"  model #{number}: model {1e3 * model.seconds:.3f} ms (transfers {1e3 * model.dma_seconds:.3f}, "
              f"compute {1e3 * model.compute_seconds:.3f}, prologue {1e3 * model.prologue_seconds:.3f}); "
              f"simulated {1e3 * timing.seconds:.3f} ms (memory busy "
              f"{1e3 * stats['dma_service_cycles'] / SUNWAY.clock_hz:.3f}, compute "
              f"{1e3 * stats['compute_cycles'] / SUNWAY.clock_hz:.3f}; "
              f"{stats['dma_get_bytes'] + stats['dma_put_bytes']:.0f} B in {stats['dma_blocks']:.0f} blocks, "
              f"{stats['dma_requests']:.0f} requests)")
        print(f"    {entry.candidate.describe()}")

    print("the model's top:")
    for row in rows[:args.top]:
        show(row)
    print("the simulator's top:")
    for row in sorted(rows, key=lambda row: row[3].seconds)[:args.top]:
        show(row)


if __name__ == "__main__":
    main()

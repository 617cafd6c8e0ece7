"""GEMM 1024^3 on the simulated core group: every feasible tiling's simulated GFLOPS (thesis figure 4.6:
81 feasible tilings, 66.83 to 363.59 GFLOPS).

    python benchmarks/sw26010_gemm_tilings.py [--size 1024]

The operator is examples/gemm.sw with tile sizes M in {128, 256, 512} (the vectorized dimension must
be a multiple of 128 when M is vectorized), N in {32, 64, 128, 256, 512}, K in {32, 64, 128, 256, 512}; every
loop order, vectorization and double buffering. Every legal candidate is timed on the timed simulator;
a tiling's figure is its best variant. Also prints the model's pick, its simulated GFLOPS and how far
it is from the best. Writes benchmarks/results/sw26010_gemm_tilings.{csv,md,png}.
"""

from __future__ import annotations

import argparse
import time

from common import RESULTS, ROOT, header, write_tables
from tqdm import tqdm

from swauto.api import load
from swauto.machine import SUNWAY
from swauto.tuner.simulate import tune
from swauto.tuner.space import explore

TILES = {"M": (128, 256, 512), "N": (32, 64, 128, 256, 512), "K": (32, 64, 128, 256, 512)}


def source() -> str:
    text = (ROOT / "examples" / "gemm.sw").read_text()
    for dim, tiles in TILES.items():
        start = text.index(f"split gemm.{dim} by {{")
        end = text.index("}", start) + 1
        text = text[:start] + f"split gemm.{dim} by {{{', '.join(map(str, tiles))}}}" + text[end:]
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    print(header())
    size = args.size
    flops = 2 * size ** 3
    space = explore(load(source(), {"M": size, "N": size, "K": size}), SUNWAY,
                    progress=lambda items: tqdm(items, desc="building candidates", leave=False))
    started = time.perf_counter()
    tuning = tune(space, progress=lambda items: tqdm(items, desc="simulating", leave=False))
    elapsed = time.perf_counter() - started
    by_tiling: dict[tuple, list] = {}
    for result in tuning.results:
        splits = result.ranked.candidate.splits
        by_tiling.setdefault(splits, []).append(result)
    rows = []
    for splits, results in by_tiling.items():
        best = min(results, key=lambda r: r.simulated_s)
        worst = max(results, key=lambda r: r.simulated_s)
        rows.append({"tiling": " ".join(f"{k}={v}" for k, v in splits), "variants": len(results),
                     "best_gflops": round(flops / best.simulated_s / 1e9, 2),
                     "worst_gflops": round(flops / worst.simulated_s / 1e9, 2),
                     "best_variant": best.ranked.candidate.describe()})
    rows.sort(key=lambda r: -r["best_gflops"])
    model_pick = min(tuning.results, key=lambda r: (r.predicted_s, r.ranked.estimate.dma_bytes))
    gflops = [flops / r.simulated_s / 1e9 for r in tuning.results]
    lines = [
        f"{len(rows)} feasible tilings ({len(tuning.results)} candidates, simulated in {elapsed:.1f} s): "
        f"best variant per tiling from {rows[-1]['best_gflops']:.2f} to {rows[0]['best_gflops']:.2f} GFLOPS; "
        f"over all candidates {min(gflops):.2f} to {max(gflops):.2f} GFLOPS (thesis: 81 tilings, 66.83 to 363.59)",
        f"model's pick: {flops / model_pick.simulated_s / 1e9:.2f} GFLOPS simulated "
        f"({model_pick.simulated_s / tuning.best.simulated_s:.3f} x the best time): "
        f"{model_pick.ranked.candidate.describe()}",
    ]
    for line in lines:
        print(line)
    write_tables("sw26010_gemm_tilings", ["tiling", "variants", "best_gflops", "worst_gflops", "best_variant"], rows,
                 f"GEMM {size}^3 on the simulated SW26010: every feasible tiling", "  \n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    axes[0].bar(range(len(rows)), [r["best_gflops"] for r in rows], label="best variant")
    axes[0].bar(range(len(rows)), [r["worst_gflops"] for r in rows], label="worst variant")
    axes[0].set(xlabel="tiling (sorted)", ylabel="simulated GFLOPS", title=f"GEMM {size}^3: every tiling")
    axes[0].legend()
    axes[1].loglog([r.simulated_s * 1e3 for r in tuning.results], [r.predicted_s * 1e3 for r in tuning.results],
                   ".", markersize=3)
    low = min(r.simulated_s for r in tuning.results) * 1e3
    high = max(r.simulated_s for r in tuning.results) * 1e3
    axes[1].plot([low, high], [low, high], "k-", linewidth=0.8)
    axes[1].set(xlabel="simulated ms", ylabel="model ms", title="model against simulator, every candidate")
    figure.tight_layout()
    figure.savefig(RESULTS / "sw26010_gemm_tilings.png", dpi=120)
    print(f"wrote {RESULTS}/sw26010_gemm_tilings.{{csv,md,png}}")


if __name__ == "__main__":
    main()

"""Fit equation 4-2 (the GEMM primitive's time) to the timed simulator's primitive, as the thesis fitted
1505 hardware timings (4.2.3, figure 4.7), and the refined model (4-2 plus an M*N term).

    python benchmarks/sw26010_gemm_fit.py

Times every primitive call size whose operands fit one CPE's local memory (float32 tile plus float64
copy, single buffered): the vectorized dimension a multiple of 128, the other of 32, K of 8, both
vectorizations. Fits (a, b, c, d) and (a, b, c, d, e) by relative least squares
(swauto.tuner.sw26010_model.fit_gemm), prints them for swauto/machine.py, each fit's error, and the
primitive's best efficiency (the thesis: 97.3% of peak) and its efficiency at short K.
Writes benchmarks/results/sw26010_gemm_fit.{csv,md,png}.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import RESULTS, header, write_tables

from swauto.backends.sw26010 import gemm_cycles
from swauto.machine import SUNWAY
from swauto.tuner.sw26010_model import fit_gemm, gemm_features


def primitive_sizes(machine=SUNWAY) -> list[tuple[int, int, int, str]]:
    """Every legal call (vec, other, K) that fits local memory, both vectorizations."""
    sizes = []
    budget = machine.ldm_usable_bytes
    for vec in range(128, 1025, 128):
        for other in range(32, 513, 32):
            for k in range(8, 1025, 8):
                elements = (vec * k + k * other + vec * other) / machine.cpes
                if elements * (4 + 8) > budget:
                    continue
                sizes.append((vec, other, k, "M"))
                sizes.append((other, vec, k, "N"))
    return sizes


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options; --help says what it does
    print(header())
    rows = []
    samples = []
    for m, n, k, vectorize in primitive_sizes():
        seconds = gemm_cycles(m, n, k, vectorize, SUNWAY) / SUNWAY.clock_hz
        samples.append((gemm_features(m, n, k, vectorize, SUNWAY), seconds))
        rows.append({"M": m, "N": n, "K": k, "vectorize": vectorize, "simulated_s": seconds,
                     "gflops": 2 * m * n * k / seconds / 1e9,
                     "peak_fraction": 2 * m * n * k / seconds / SUNWAY.peak_flops})
    features = np.array([f for f, _ in samples])
    measured = np.array([s for _, s in samples])
    fits = {"4-2": fit_gemm(samples, 4), "refined": fit_gemm(samples, 5)}
    errors = {}
    for name, coefficients in fits.items():
        predicted = features[:, : len(coefficients)] @ np.array(coefficients)
        errors[name] = np.abs(predicted - measured) / measured
        for row, p in zip(rows, predicted, strict=True):
            row[f"{name}_s"] = float(p)
            row[f"{name}_error"] = float(abs(p - row["simulated_s"]) / row["simulated_s"])
    best = max(rows, key=lambda r: r["peak_fraction"])
    short = [r for r in rows if r["K"] == 8]
    for name, coefficients in fits.items():
        error = errors[name]
        print(f"{len(samples)} primitive sizes; {name}: {', '.join(f'{c:.6g}' for c in coefficients)}; "
              f"error mean {100 * error.mean():.2f}%, max {100 * error.max():.2f}% (thesis: c = 3.10e-12)")
    print(f"best call {best['M']}x{best['N']}x{best['K']} vectorize {best['vectorize']}: "
          f"{best['gflops']:.1f} GFLOPS, {100 * best['peak_fraction']:.1f}% of peak (thesis 97.3%)")
    print(f"K = 8: at most {100 * max(r['peak_fraction'] for r in short):.1f}% of peak")
    notes = "; ".join(f"{name}: {', '.join(f'{c:.6g}' for c in coefficients)} (relative error mean "
                      f"{100 * errors[name].mean():.2f}%, max {100 * errors[name].max():.2f}%)"
                      for name, coefficients in fits.items())
    notes = (f"{len(samples)} sizes. Fitted {notes}. Best call {best['M']}x{best['N']}x{best['K']} "
             f"({best['vectorize']}): {100 * best['peak_fraction']:.1f}% of peak. The table lists every 97th size.")
    fields = ["M", "N", "K", "vectorize", "simulated_s", "4-2_s", "4-2_error", "refined_s", "refined_error",
              "gflops", "peak_fraction"]
    write_tables("sw26010_gemm_fit", fields, rows[::97], "GEMM primitive: simulated time against equation 4-2",
                 notes)
    with open(RESULTS / "sw26010_gemm_fit.csv", "w") as out:  # the CSV keeps every size
        out.write(",".join(fields) + "\n")
        for row in rows:
            out.write(",".join(str(row[f]) for f in fields) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for name in fits:
        axes[0].loglog(measured * 1e6, np.array([r[f"{name}_s"] for r in rows]) * 1e6, ".", markersize=2,
                       label=name)
    axes[0].legend()
    line = [measured.min() * 1e6, measured.max() * 1e6]
    axes[0].plot(line, line, "k-", linewidth=0.8)
    axes[0].set(xlabel="simulated primitive time (us)", ylabel="fitted (us)",
                title="least-squares fits: equation 4-2 and the refined model")
    ks = sorted({r["K"] for r in rows})
    axes[1].plot(ks, [100 * max(r["peak_fraction"] for r in rows if r["K"] == k) for k in ks])
    axes[1].set(xlabel="K", ylabel="best % of peak at this K", title="primitive efficiency against K")
    figure.tight_layout()
    figure.savefig(RESULTS / "sw26010_gemm_fit.png", dpi=120)
    print(f"wrote {RESULTS}/sw26010_gemm_fit.{{csv,md,png}}")


if __name__ == "__main__":
    main()

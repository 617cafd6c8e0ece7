"""The thesis' operator library on swauto (issue 10): the three convolution algorithms and the
algorithm choice, and the LSTM against its baseline, on the simulated SW26010; the host against
PyTorch for the operators PyTorch has.

    python benchmarks/algorithms.py [--parts sw-conv sw-lstm host] [--full] [--repeat 9]

- sw-conv: `examples/conv2d.sw` (implicit GEMM), `conv2d_explicit.sw` and `conv2d_winograd.sw`,
  each model-tuned (`swauto.compile(target="sw26010")`) and run on the timed simulator, over
  listing 5.1's parameters (B in 1, 32, 128; Ni >= No in 64..512; Ro = Co; 3 x 3, stride 1, pad 1).
  The default run takes a sample (Ni = No in 64, 256, 512 and Ni = 512, No = 256; Ro = 32); `--full`
  takes the whole listing (180 layers, about 45 s each: hours) into results/listing_5_1.{csv,md,png}
  alone, saved after every layer and resumed by the next `--full` run (`--restart`: from scratch).
  GFLOPS count a direct convolution's flops (2 Ro Co No Ni B Kr Kc), so Winograd's effective rate
  can exceed the peak; percent of one core group's peak (742.4 GFLOPS; the thesis' figures are per
  chip, four core groups with Ro split among them, the same percentage when the split is even).
  `choice` is what `swauto.choose` keeps (the model's fastest), `best` the algorithm the simulator
  finds fastest. Figure: results/algorithms_sw26010.png (listing_5_1_sw26010.png), box plots of
  percent of peak per algorithm and B.
- sw-lstm: `examples/lstm.sw` (algorithm 6) against `examples/lstm_baseline.sw` over a sample of
  listing 5.2 (T in 64, 256; B in 64, 128; H in 64, 256; In = H), model-tuned, simulated; with
  `--full`, all of it (T in 64 ... 2048, B in 64, 96, 128, H in 64, 128, 256, 384: 72 shapes).
- host: on 1 and 2 threads, the model's pick against PyTorch (oneDNN) on the same inputs, medians of
  `--repeat` calls taking turns: each convolution algorithm and `swauto.choose` against
  `torch.nn.functional.conv2d` (NCHW copies made outside the timed region), and the LSTM against
  `torch.nn.LSTM` (its weights set to W, R and the bias); the training operators against
  `torch.nn.grad.conv2d_input` / `conv2d_weight` and the FC backward's three products, batchnorm
  against `torch.nn.functional.batch_norm` in inference (scale and shift as its weight and bias).

Writes benchmarks/results/algorithms.{csv,md} with the machine, the date and the command.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from common import (  # benchmarks/ is on the path when run as a script
    RESULTS,
    csv_number,
    header,
    machine_name,
    median_seconds,
    settle,
    steady_allocator,
    write_tables,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
ALGORITHMS = ("conv2d", "conv2d_explicit", "conv2d_winograd")
PEAK_CG = 742.4e9  # one core group: 64 CPEs x 1.45 GHz x 8 flops (4-wide FMA)


def listing_5_1(full: bool) -> list[dict[str, int]]:
    """The convolution layers of listing 5.1 (all, or the default sample)."""
    if full:
        channels = [(ni, no) for ni in (64, 128, 256, 384, 512) for no in (64, 128, 256, 384, 512) if ni >= no]
        sizes = (32, 64, 128, 256)
    else:
        channels, sizes = [(64, 64), (256, 256), (512, 256), (512, 512)], (32,)
    return [{"B": b, "Ni": ni, "No": no, "Ri": ro, "Ci": ro, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
            for b in (1, 32, 128) for (ni, no) in channels for ro in sizes]


def direct_flops(p: dict[str, int]) -> int:
    ro = (p["Ri"] + 2 * p["pad"] - p["Kr"]) // p["stride"] + 1
    co = (p["Ci"] + 2 * p["pad"] - p["Kc"]) // p["stride"] + 1
    return 2 * ro * co * p["No"] * p["Ni"] * p["B"] * p["Kr"] * p["Kc"]


def sw_conv(full: bool, done: dict[str, dict[str, object]] | None = None,
            save: Callable[[list[dict[str, object]]], None] | None = None) -> list[dict[str, object]]:
    """One row per layer; layers in `done` (by shape) are kept, not run again; `save` gets the rows
    after each layer."""
    import swauto

    rows: list[dict[str, object]] = []
    for params in listing_5_1(full):
        if done and _shape(params) in done:
            rows.append(done[_shape(params)])
            continue
        row: dict[str, object] = {"part": "sw-conv", "shape": _shape(params)}
        flops = direct_flops(params)
        predicted = {}
        for name in ALGORITHMS:
            started = time.perf_counter()
            try:
                kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target="sw26010")
            except swauto.SwautoError as error:
                row[f"{name}_note"] = str(error).split(";")[0][:80]
                continue
            seconds = kernel.report["simulated_s"]
            predicted[name] = kernel.report["predicted_s"]
            row[f"{name}_ms"] = 1e3 * seconds
            row[f"{name}_pct"] = 100 * flops / seconds / PEAK_CG
            row[f"{name}_compile_s"] = time.perf_counter() - started
        simulated = {name: row[f"{name}_ms"] for name in ALGORITHMS if f"{name}_ms" in row}
        row["choice"] = min(predicted, key=predicted.get)  # what swauto.choose keeps
        row["best"] = min(simulated, key=simulated.get)
        row["choice_vs_best"] = simulated[row["choice"]] / simulated[row["best"]]
        row["measured"] = f"{datetime.date.today()} {machine_name()}"
        rows.append(row)
        print(" ".join(f"{k}={_show(v)}" for k, v in row.items()), flush=True)
        if save:
            save(rows)
    return rows


def listing_5_2(full: bool) -> list[tuple[int, int, int]]:
    """(T, B, H) of listing 5.2 (all 72, or the default sample of 8)."""
    if full:
        return list(itertools.product((64, 128, 256, 512, 1024, 2048), (64, 96, 128), (64, 128, 256, 384)))
    return list(itertools.product((64, 256), (64, 128), (64, 256)))


def sw_lstm(full: bool = False) -> list[dict[str, object]]:
    import swauto

    rows = []
    for t, b, h in listing_5_2(full):
        params = {"T": t, "B": b, "In": h, "H": h}
        row: dict[str, object] = {"part": "sw-lstm", "shape": f"T={t} B={b} In=H={h}"}
        for name in ("lstm", "lstm_baseline"):
            try:
                kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target="sw26010")
            except swauto.SwautoError as error:
                row[f"{name}_note"] = str(error)[:80]
                continue
            row[f"{name}_ms"] = 1e3 * kernel.report["simulated_s"]
            row[f"{name}_pct"] = 100 * kernel.report["peak_fraction"]
        if "lstm_ms" in row and "lstm_baseline_ms" in row:
            row["speedup"] = row["lstm_baseline_ms"] / row["lstm_ms"]  # type: ignore[operator]
        rows.append(row)
        print(" ".join(f"{k}={_show(v)}" for k, v in row.items()), flush=True)
    return rows


HOST_CONVS = [{"B": 1, "Ni": 64, "No": 64, "Ri": 56, "Ci": 56, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
              {"B": 8, "Ni": 256, "No": 256, "Ri": 14, "Ci": 14, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}]
HOST_LSTM = {"T": 64, "B": 64, "In": 256, "H": 256}


def host(repeat: int) -> list[dict[str, object]]:
    import torch

    import swauto

    rows = []
    rng = np.random.default_rng(0)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for params in HOST_CONVS:
            x = rng.standard_normal((params["Ri"], params["Ci"], params["Ni"], params["B"]), dtype=np.float32)
            w = rng.standard_normal((3, 3, params["No"], params["Ni"]), dtype=np.float32) * 0.1
            xt = torch.from_numpy(np.ascontiguousarray(x.transpose(3, 2, 0, 1)))
            wt = torch.from_numpy(np.ascontiguousarray(w.transpose(2, 3, 0, 1)))
            reference = torch.nn.functional.conv2d(xt, wt, padding=1).numpy().transpose(2, 3, 1, 0)
            flops = direct_flops(params)
            chosen = swauto.choose([EXAMPLES / f"{n}.sw" for n in ALGORITHMS], params, target="host",
                                   threads=threads)
            for name in ALGORITHMS:
                kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target="host", threads=threads)
                out = np.zeros(reference.shape, np.float32)
                kernel(input=x, weight=w, output=out)
                error = float(np.abs(out - reference).max() / np.abs(reference).max())
                with torch.inference_mode():
                    ours, theirs = median_seconds(partial(kernel, input=x, weight=w, output=out),
                                                  partial(torch.nn.functional.conv2d, xt, wt, padding=1),
                                                  repeat=repeat, settle=settle(threads))
                row = {"part": "host", "shape": _shape(params), "threads": threads, "operator": name,
                       "chosen": name == chosen.operator.name, "swauto_ms": 1e3 * ours, "torch_ms": 1e3 * theirs,
                       "swauto_vs_torch": theirs / ours, "swauto_gflops": flops / ours / 1e9, "rel_err": error}
                rows.append(row)
                print(" ".join(f"{k}={_show(v)}" for k, v in row.items()), flush=True)
        rows.append(_host_lstm(threads, repeat, rng))
        print(" ".join(f"{k}={_show(v)}" for k, v in rows[-1].items()), flush=True)
        for row in _host_others(threads, repeat, rng):
            rows.append(row)
            print(" ".join(f"{k}={_show(v)}" for k, v in row.items()), flush=True)
    return rows


TRAINING_CONV = {"B": 8, "Ni": 64, "No": 64, "Ri": 28, "Ci": 28, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
FC = {"B": 32, "In": 1024, "Out": 1024}
BATCHNORM = {"B": 8, "Ch": 64, "R": 56, "C": 56}


def _host_others(threads: int, repeat: int, rng: np.random.Generator) -> list[dict[str, object]]:
    """The training operators and batch normalization against PyTorch's own functions, on the same
    arrays (PyTorch's in NCHW, copied outside the timed region); the flops are the GEMMs' (batchnorm:
    its bytes moved are what matters, given as GB/s)."""
    import torch

    import swauto

    def nchw(a: np.ndarray) -> torch.Tensor:  # [R, C, Ch, B] -> [B, Ch, R, C]
        return torch.from_numpy(np.ascontiguousarray(a.transpose(3, 2, 0, 1)))

    def oihw(w: np.ndarray) -> torch.Tensor:  # [Kr, Kc, No, Ni] -> [No, Ni, Kr, Kc]
        return torch.from_numpy(np.ascontiguousarray(w.transpose(2, 3, 0, 1)))

    p = TRAINING_CONV
    x = rng.standard_normal((p["Ri"], p["Ci"], p["Ni"], p["B"]), dtype=np.float32)
    w = rng.standard_normal((3, 3, p["No"], p["Ni"]), dtype=np.float32)
    gy = rng.standard_normal((p["Ri"], p["Ci"], p["No"], p["B"]), dtype=np.float32)
    xt, wt, gyt = nchw(x), oihw(w), nchw(gy)
    conv_flops = direct_flops(p)
    fc = FC
    fx = rng.standard_normal((fc["B"], fc["In"]), dtype=np.float32)
    fw = rng.standard_normal((fc["In"], fc["Out"]), dtype=np.float32)
    fgy = rng.standard_normal((fc["B"], fc["Out"]), dtype=np.float32)
    tfx, tfw, tfgy = torch.from_numpy(fx), torch.from_numpy(fw), torch.from_numpy(fgy)

    def fc_torch() -> tuple[torch.Tensor, ...]:
        return tfgy @ tfw.T, tfx.T @ tfgy, tfgy.sum(0)

    bn = BATCHNORM
    bx = rng.standard_normal((bn["R"], bn["C"], bn["Ch"], bn["B"]), dtype=np.float32)
    scale, shift = rng.random(bn["Ch"], dtype=np.float32), rng.standard_normal(bn["Ch"], dtype=np.float32)
    bxt, ones, zeros = nchw(bx), torch.ones(bn["Ch"]), torch.zeros(bn["Ch"])
    cases = [  # name, params, arrays, output name, PyTorch call, PyTorch result in swauto's layout, flops
        ("conv2d_backward_data", p, {"grad_output": gy, "weight": w}, "grad_input",
         partial(torch.nn.grad.conv2d_input, xt.shape, wt, gyt, padding=1),
         lambda r: r.numpy().transpose(2, 3, 1, 0), conv_flops),
        ("conv2d_backward_weight", p, {"input": x, "grad_output": gy}, "grad_weight",
         partial(torch.nn.grad.conv2d_weight, xt, wt.shape, gyt, padding=1),
         lambda r: r.numpy().transpose(2, 3, 0, 1), conv_flops),
        ("fc_backward", fc, {"x": fx, "weight": fw, "grad_y": fgy}, "grad_weight", fc_torch,
         lambda r: r[1].numpy(), 4 * fc["B"] * fc["In"] * fc["Out"]),
        ("batchnorm", bn, {"x": bx, "scale": scale, "shift": shift}, "y",
         partial(torch.nn.functional.batch_norm, bxt, zeros, ones, torch.from_numpy(scale),
                 torch.from_numpy(shift), False, 0.0, 0.0),
         lambda r: r.numpy().transpose(2, 3, 1, 0), None),
    ]
    rows = []
    with torch.inference_mode():
        for name, params, arrays, output, call, layout, flops in cases:
            kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=params, target="host", threads=threads)
            outputs = {t.name: np.zeros(t.shape, np.float32) for t in kernel.operator.seed.tensors
                       if t.is_output}
            kernel(**arrays, **outputs)
            expected = layout(call())
            error = float(np.abs(outputs[output] - expected).max() / np.abs(expected).max())
            ours, theirs = median_seconds(partial(kernel, **arrays, **outputs), call, repeat=repeat,
                                          settle=settle(threads))
            row: dict[str, object] = {"part": "host", "shape": str(params), "threads": threads, "operator": name,
                                      "swauto_ms": 1e3 * ours, "torch_ms": 1e3 * theirs,
                                      "swauto_vs_torch": theirs / ours, "rel_err": error}
            if flops:
                row["swauto_gflops"] = flops / ours / 1e9
            else:
                row["swauto_GBps"] = 2 * bx.nbytes / ours / 1e9
            rows.append(row)
    return rows


def _host_lstm(threads: int, repeat: int, rng: np.random.Generator) -> dict[str, object]:
    import torch

    import swauto

    p = HOST_LSTM
    t, b, n, h = p["T"], p["B"], p["In"], p["H"]
    a = {"x": rng.standard_normal((t, b, n), dtype=np.float32), "h0": rng.standard_normal((b, h), dtype=np.float32),
         "c0": rng.standard_normal((b, h), dtype=np.float32),
         "W": rng.standard_normal((n, 4 * h), dtype=np.float32) * 0.05,
         "R": rng.standard_normal((h, 4 * h), dtype=np.float32) * 0.05,
         "bias": rng.standard_normal(4 * h, dtype=np.float32) * 0.1,
         "h": np.zeros((t, b, h), np.float32), "c_last": np.zeros((b, h), np.float32)}
    lstm = torch.nn.LSTM(n, h)
    with torch.no_grad():  # PyTorch's gate order is i, f, g, o too: weights are [4H, In]
        lstm.weight_ih_l0.copy_(torch.from_numpy(a["W"].T.copy()))
        lstm.weight_hh_l0.copy_(torch.from_numpy(a["R"].T.copy()))
        lstm.bias_ih_l0.copy_(torch.from_numpy(a["bias"]))
        lstm.bias_hh_l0.zero_()
    xt, state = torch.from_numpy(a["x"]), (torch.from_numpy(a["h0"])[None], torch.from_numpy(a["c0"])[None])
    row: dict[str, object] = {"part": "host", "shape": f"T={t} B={b} In={n} H={h}", "threads": threads}
    flops = 2 * t * b * 4 * h * (n + h)
    with torch.inference_mode():
        expected, (_, c_last) = lstm(xt, state)
        for name in ("lstm", "lstm_baseline"):
            kernel = swauto.compile(EXAMPLES / f"{name}.sw", params=p, target="host", threads=threads)
            kernel(**a)
            error = max(float(np.abs(a["h"] - expected.numpy()).max()),
                        float(np.abs(a["c_last"] - c_last[0].numpy()).max()))
            ours, theirs = median_seconds(partial(kernel, **a), partial(lstm, xt, state), repeat=repeat,
                                          settle=settle(threads))
            row.update({f"{name}_ms": 1e3 * ours, f"{name}_gflops": flops / ours / 1e9, f"{name}_err": error})
        row["torch_ms"] = 1e3 * theirs
        row["operator"] = "lstm"
        row["swauto_vs_torch"] = theirs / (row["lstm_ms"] / 1e3)  # type: ignore[operator]
    return row


def plot(rows: list[dict[str, object]], name: str = "algorithms_sw26010", what: str = "listing 5.1 sample") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conv = [r for r in rows if r["part"] == "sw-conv"]
    if not conv:
        return
    figure, axes = plt.subplots(1, 3, figsize=(12, 4), sharey=True)
    for axis, batch in zip(axes, (1, 32, 128), strict=True):
        data = [[r[f"{name}_pct"] for r in conv if f"B={batch} " in str(r["shape"]) and f"{name}_pct" in r]
                for name in ALGORITHMS]
        axis.boxplot(data)
        axis.set_xticks([1, 2, 3], ["implicit", "explicit", "Winograd"])
        axis.set_title(f"B = {batch}")
        axis.axhline(100, color="grey", linewidth=0.5)
    axes[0].set_ylabel("% of one core group's peak (direct-convolution flops)")
    figure.suptitle(f"Convolution algorithms on the simulated SW26010 ({what})")
    figure.tight_layout()
    figure.savefig(RESULTS / f"{name}.png", dpi=120)
    plt.close(figure)


def _earlier_rows(parts: set[str], name: str = "algorithms") -> list[dict[str, object]]:
    """The rows of results/NAME.csv from parts other than `parts` (numbers read back as floats)."""
    import csv

    path = RESULTS / f"{name}.csv"
    if not path.exists():
        return []
    with open(path, newline="") as file:
        rows = [row for row in csv.DictReader(file) if row["part"] not in parts]
    return [{key: csv_number(value) for key, value in row.items() if value != ""} for row in rows]


def full_listing(restart: bool) -> None:
    """All of listing 5.1 into results/listing_5_1.{csv,md,png}, saved after every layer; a run picks
    up where the last one stopped unless `restart`."""
    done = {} if restart else {str(r["shape"]): r for r in _earlier_rows(set(), "listing_5_1")}
    started = time.perf_counter()

    def save(rows: list[dict[str, object]]) -> None:
        order = {"part": 0, "measured": 1, "shape": 2}
        fields = sorted(dict.fromkeys(key for row in rows for key in row), key=lambda f: order.get(f, 3))
        write_tables("listing_5_1", fields, rows, "Listing 5.1 in full: the three convolution algorithms (issue 10)",
                     f"Produced by `benchmarks/algorithms.py --full` (see its docstring); {len(rows)} of "
                     f"{len(listing_5_1(True))} layers; this run {time.perf_counter() - started:.0f} s.")
        plot(rows, "listing_5_1_sw26010", "listing 5.1")

    sw_conv(True, done, save)


def _shape(p: dict[str, int]) -> str:
    return f"B={p['B']} {p['Ni']}->{p['No']} {p['Ri']}x{p['Ci']}"


def _show(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("sw-conv", "sw-lstm", "host"),
                        default=["sw-conv", "sw-lstm", "host"])
    parser.add_argument("--full", action="store_true",
                        help="all of listings 5.1 and 5.2 instead of samples (5.1: hours, into "
                             "results/listing_5_1.*, resumed where the last run stopped)")
    parser.add_argument("--restart", action="store_true", help="with --full: measure every layer again")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--cache-dir", help="swauto's cache folder (default: a fresh temporary folder)")
    args = parser.parse_args()
    steady_allocator()
    os.environ["SWAUTO_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="swauto-algorithms-")
    print(header(), flush=True)
    started = time.perf_counter()
    rows: list[dict[str, object]] = []
    if args.full and "sw-conv" in args.parts:
        full_listing(args.restart)
        args.parts.remove("sw-conv")
        if not args.parts:
            return
    if "sw-conv" in args.parts:
        rows += sw_conv(False)
    if "sw-lstm" in args.parts:
        rows += sw_lstm(args.full)
    if "host" in args.parts:
        rows += host(args.repeat)
    measured = f"{datetime.date.today()} {machine_name()}"
    rows = [{"part": row["part"], "measured": measured, **row} for row in rows]  # sw-conv rows have theirs
    rows = _earlier_rows(set(args.parts)) + rows  # the parts not run this time stay as they were
    order = {"part": 0, "measured": 1, "shape": 2}
    fields = sorted(dict.fromkeys(key for row in rows for key in row), key=lambda f: order.get(f, 3))
    write_tables("algorithms", fields, rows, "Convolution algorithms, LSTM and the algorithm choice (issue 10)",
                 f"Produced by `benchmarks/algorithms.py` (its docstring says what each figure is). "
                 f"Whole run: {time.perf_counter() - started:.0f} s.", group="part")
    plot(rows)


if __name__ == "__main__":
    main()

"""The six example operators beyond GEMM and conv2d, on both targets: space, model tuning, host against
PyTorch, the SW26010's simulated figures, and fused against unfused candidates.

    python benchmarks/operators.py [--operators NAME ...] [--targets host sw26010] [--repeat 9]
                                   [--no-fusion] [--cache-dir DIR]

The operators are examples/fc_bias_relu.sw, softmax.sw, maxpool.sw, avgpool.sw, conv2d_bias_relu.sw
and conv2d_nchw.sw at their files' default sizes, plus conv2d_bias_relu at a ResNet-like layer
(`conv2d_bias_relu_resnet`: B = 1, 64 -> 64 channels, 56 x 56, 3 x 3, pad 1) and conv2d_nchw at
B = 1, 64 -> 64, 56 x 56, 3 x 3, stride 1, pad 1 (its file's defaults). For each operator and target:

- space: `len(swauto.schedules(...))` and the seconds to build it;
- compile: `swauto.compile(...)` with the model tuner (threads=1 on the host), cold (an empty
  SWAUTO_CACHE_DIR: a fresh temporary folder unless `--cache-dir`, set before swauto is imported) and
  again warm (the tuning log answers), and the model's pick (`kernel.schedule.describe()`). The host's
  calibration (once per machine, in that folder) is measured first and timed apart, not in the
  compile times;
- host: the pick on random float32 inputs, the median of `--repeat` calls after 3 warm-up calls (swauto and PyTorch
  taking turns so that bursts of load on a shared machine hit both, each timed call right after an
  untimed one of the same function, its data in the caches), GFLOPS
  (`report["flops"]`) and GB/s (bytes of the inputs and outputs, local tensors excluded, over the
  time), checked against a float64 NumPy reference (max |error| / max |reference| < 1e-4), and the
  same computation in PyTorch on one thread (`torch.set_num_threads(1)`, inference mode; NCHW copies
  of the NHWC-like tensors are made outside the timed region; conv2d_bias_relu is
  relu(conv2d(x, w, bias)), the bias through conv2d's own argument); ratio = time_torch / time_swauto.
  The pooling and conv2d_bias_relu are also timed with PyTorch's channels-last memory format (NHWC in
  memory, a copy made outside the timed region): on one thread PyTorch's NCHW max pooling is an order
  of magnitude slower than its channels-last one, so both are shown;
- sw26010: `report["simulated_s"]`, GFLOPS and percent of one core group's peak from the timed
  simulator, the DMA bytes and their bandwidth (dma_bytes / simulated_s) as a percent of the core
  group's 30.94 GB/s;
- fusion (fc_bias_relu, conv2d_bias_relu; not with `--no-fusion`): the model ranks every legal
  candidate (`swauto.tuner.model_tuner.rank`, the model tuner's own ranking); the best candidate of
  each fusion choice (nothing fused, bias fused, bias and relu fused) is compiled with
  `schedule=candidate`, giving `predicted_s`, on the SW26010 `simulated_s`, and on the host a measured
  median too.

Prints the table and writes benchmarks/results/operators.{csv,md} with the machine, the date and the
command. The default run takes about 2.5 minutes on 2 cores (11 s of it the host's calibration).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import RESULTS, header, median_seconds, steady_allocator  # benchmarks/ is on the path when run as a script

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RESNET = {"B": 1, "Ni": 64, "No": 64, "Ri": 56, "Ci": 56, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
# name -> (example file, parameters beyond the file's defaults)
OPERATORS: dict[str, tuple[str, dict[str, int]]] = {
    "fc_bias_relu": ("fc_bias_relu", {}),
    "softmax": ("softmax", {}),
    "maxpool": ("maxpool", {}),
    "avgpool": ("avgpool", {}),
    "conv2d_bias_relu": ("conv2d_bias_relu", {}),
    "conv2d_bias_relu_resnet": ("conv2d_bias_relu", RESNET),
    "conv2d_nchw": ("conv2d_nchw", RESNET),
}
FIELDS = [
    "operator", "shape", "target", "what", "space", "space_s", "compile_s", "warm_compile_s", "candidate",
    "flops", "predicted_s", "swauto_s", "swauto_gflops", "swauto_GBps", "torch_s", "torch_gflops", "torch_GBps",
    "swauto_vs_torch", "rel_err", "torch_rel_err", "torch_cl_s", "swauto_vs_torch_cl", "torch_cl_rel_err",
    "simulated_s", "sim_gflops", "peak_pct", "dma_bytes",
    "dma_GBps", "dma_pct_peak",
]
TOLERANCE = 1e-4
FUSING = ("fc_bias_relu", "conv2d_bias_relu")  # the examples with `fuse X into Y` (producer/consumer fusion)
CHANNELS_LAST = ("maxpool", "avgpool", "conv2d_bias_relu")  # also timed in PyTorch's channels-last format


# --- inputs, references and PyTorch ----------------------------------------------------------------


def inputs(kernel, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 arrays for every tensor a call takes (outputs zeroed), in declared shapes."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for tensor in kernel.operator.seed.tensors:
        if tensor.is_local:
            continue
        if tensor.is_output:
            arrays[tensor.name] = np.zeros(tensor.shape, np.float32)
        else:
            arrays[tensor.name] = rng.standard_normal(tensor.shape, dtype=np.float32)
    return arrays


def _windows(x: np.ndarray, k: int, stride: int, rows: int, cols: int):
    """The K x K shifted views x[r * stride + kr, c * stride + kc] (axes 0 and 1) of a pooling window."""
    for kr in range(k):
        for kc in range(k):
            yield x[kr:kr + stride * (rows - 1) + 1:stride, kc:kc + stride * (cols - 1) + 1:stride]


def reference(example: str, p: dict[str, int], a: dict[str, np.ndarray]) -> np.ndarray:
    """The operator's output in float64 NumPy, in swauto's declared layout."""
    f = {name: array.astype(np.float64) for name, array in a.items()}
    if example == "fc_bias_relu":
        return np.maximum(f["x"] @ f["weight"] + f["bias"], 0)
    if example == "softmax":
        e = np.exp(f["x"] - f["x"].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if example in ("maxpool", "avgpool"):
        ro, co = (p["Ri"] - p["K"]) // p["stride"] + 1, (p["Ci"] - p["K"]) // p["stride"] + 1
        views = list(_windows(f["input"], p["K"], p["stride"], ro, co))
        return np.maximum.reduce(views) if example == "maxpool" else sum(views) / len(views)
    pad, stride = p["pad"], p["stride"]
    ro = (p["Ri"] + 2 * pad - p["Kr"]) // stride + 1
    co = (p["Ci"] + 2 * pad - p["Kc"]) // stride + 1
    if example == "conv2d_bias_relu":  # input [Ri, Ci, Ni, B], weight [Kr, Kc, No, Ni], output [Ro, Co, No, B]
        x = np.pad(f["input"], ((pad, pad), (pad, pad), (0, 0), (0, 0)))
        out = np.zeros((ro, co, p["No"], p["B"]))
        for kr in range(p["Kr"]):
            for kc in range(p["Kc"]):
                view = x[kr:kr + stride * (ro - 1) + 1:stride, kc:kc + stride * (co - 1) + 1:stride]
                out += np.einsum("rcib,oi->rcob", view, f["weight"][kr, kc], optimize=True)
        return np.maximum(out + f["bias"][None, None, :, None], 0)
    if example == "conv2d_nchw":  # input [B, Ni, Ri, Ci], weight [No, Ni, Kr, Kc], output [B, No, Ro, Co]
        x = np.pad(f["input"], ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((p["B"], p["No"], ro, co))
        for kr in range(p["Kr"]):
            for kc in range(p["Kc"]):
                view = x[:, :, kr:kr + stride * (ro - 1) + 1:stride, kc:kc + stride * (co - 1) + 1:stride]
                out += np.einsum("birc,oi->borc", view, f["weight"][:, :, kr, kc], optimize=True)
        return out
    raise ValueError(f"no reference for {example}")


def torch_call(example: str, p: dict[str, int], a: dict[str, np.ndarray], channels_last: bool = False):
    """(a call of the same computation in PyTorch on its own layouts, a function mapping its result to
    swauto's declared layout). Layout copies happen here, outside the timed call. `channels_last`: the
    4-D tensors of the pooling and conv2d_bias_relu in PyTorch's channels-last memory format instead
    (NHWC in memory; PyTorch's faster path for pooling on one thread)."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's usual name

    if example == "fc_bias_relu":
        x, w, b = (torch.from_numpy(a[n]) for n in ("x", "weight", "bias"))
        return (lambda: torch.relu(x @ w + b)), (lambda y: y.numpy())
    if example == "softmax":
        x = torch.from_numpy(a["x"])
        return (lambda: torch.softmax(x, dim=1)), (lambda y: y.numpy())
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    if example in ("maxpool", "avgpool"):
        x = torch.from_numpy(a["input"]).permute(3, 2, 0, 1).contiguous(memory_format=memory_format)  # NCHW
        pool = F.max_pool2d if example == "maxpool" else F.avg_pool2d
        return (lambda: pool(x, p["K"], p["stride"])), (lambda y: y.permute(2, 3, 1, 0).contiguous().numpy())
    if example == "conv2d_bias_relu":
        x = torch.from_numpy(a["input"]).permute(3, 2, 0, 1).contiguous(memory_format=memory_format)  # NCHW
        w = torch.from_numpy(a["weight"]).permute(2, 3, 0, 1).contiguous(memory_format=memory_format)  # OIHW
        b = torch.from_numpy(a["bias"])
        return ((lambda: torch.relu(F.conv2d(x, w, b, stride=p["stride"], padding=p["pad"]))),
                (lambda y: y.permute(2, 3, 1, 0).contiguous().numpy()))
    if example == "conv2d_nchw":
        x, w = torch.from_numpy(a["input"]), torch.from_numpy(a["weight"])
        return (lambda: F.conv2d(x, w, stride=p["stride"], padding=p["pad"])), (lambda y: y.numpy())
    raise ValueError(f"no PyTorch form of {example}")


def rel_err(result: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(result - expected)) / max(np.max(np.abs(expected)), 1e-30))


def moved_bytes(kernel) -> int:
    """Bytes of the inputs and outputs a call takes (the operator's local tensors excluded)."""
    return sum(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize
               for t in kernel.operator.seed.tensors if not t.is_local)


# --- the measurements ---------------------------------------------------------------------------------


def run_host(kernel, example: str, repeat: int, with_torch: bool) -> dict[str, object]:
    """Time the kernel (and PyTorch) on random inputs; check its result against the reference."""
    params = dict(kernel.operator.params)
    arrays = inputs(kernel)
    output = next(t.name for t in kernel.operator.seed.tensors if t.is_output)
    expected = reference(example, params, arrays)
    kernel(**arrays)
    error = rel_err(arrays[output], expected)
    flops, moved = kernel.report["flops"], moved_bytes(kernel)
    if not with_torch:
        (seconds,) = median_seconds(lambda: kernel(**arrays), repeat=repeat)
        error = max(error, rel_err(arrays[output], expected))  # still right after the timed calls
        return {"swauto_s": seconds, "swauto_gflops": flops / seconds / 1e9, "swauto_GBps": moved / seconds / 1e9,
                "rel_err": error}
    import torch

    torch.set_num_threads(1)
    forms = [torch_call(example, params, arrays)]
    if example in CHANNELS_LAST:
        forms.append(torch_call(example, params, arrays, channels_last=True))
    with torch.inference_mode():
        seconds, *theirs = median_seconds(lambda: kernel(**arrays), *(call for call, _ in forms), repeat=repeat)
        errors = [rel_err(to_declared(call()).astype(np.float64), expected) for call, to_declared in forms]
    error = max(error, rel_err(arrays[output], expected))  # still right after the timed calls
    row: dict[str, object] = {
        "swauto_s": seconds, "swauto_gflops": flops / seconds / 1e9, "swauto_GBps": moved / seconds / 1e9,
        "rel_err": error, "torch_s": theirs[0], "torch_gflops": flops / theirs[0] / 1e9,
        "torch_GBps": moved / theirs[0] / 1e9, "swauto_vs_torch": theirs[0] / seconds, "torch_rel_err": errors[0],
    }
    if len(forms) > 1:
        row.update(torch_cl_s=theirs[1], swauto_vs_torch_cl=theirs[1] / seconds, torch_cl_rel_err=errors[1])
    return row


def sw_figures(kernel) -> dict[str, object]:
    import swauto.machine

    report = kernel.report
    bandwidth = report["dma_bytes"] / report["simulated_s"]
    return {"simulated_s": report["simulated_s"], "sim_gflops": report["gflops"],
            "peak_pct": 100 * report["peak_fraction"], "dma_bytes": report["dma_bytes"],
            "dma_GBps": bandwidth / 1e9, "dma_pct_peak": 100 * bandwidth / swauto.machine.SUNWAY.peak_bandwidth}


def fusion_rows(name: str, example: str, params: dict[str, int], target: str, shape: str, repeat: int,
                problems: list[str]) -> list[dict[str, object]]:
    """The model's best candidate of each fusion choice, compiled with schedule=candidate."""
    import swauto
    from swauto import targets
    from swauto.api import load
    from swauto.tuner.model_tuner import rank
    from swauto.tuner.space import explore

    path = EXAMPLES / f"{example}.sw"
    threads = 1 if target == "host" else None
    started = time.perf_counter()
    ranked = rank(explore(load(path, params), targets.get(target).machine()), target, 1)
    ranking_s = time.perf_counter() - started
    best: dict[tuple[str, ...], tuple[int, object]] = {}
    counts: dict[tuple[str, ...], int] = {}
    for position, entry in enumerate(ranked):
        fused = entry.candidate.fused
        counts[fused] = counts.get(fused, 0) + 1
        best.setdefault(fused, (position, entry.candidate))
    rows = []
    for fused in sorted(best, key=len, reverse=True):
        position, candidate = best[fused]
        kernel = swauto.compile(path, params=params, target=target, schedule=candidate, threads=threads)
        row: dict[str, object] = {
            "operator": name, "shape": shape, "target": target,
            "what": f"fused {'+'.join(fused) or 'nothing'}: best of {counts[fused]} (model rank {position + 1})",
            "space": counts[fused], "space_s": ranking_s, "candidate": kernel.schedule.describe(),
            "flops": kernel.report["flops"], "predicted_s": kernel.report["predicted_s"],
        }
        if target == "host":
            row.update(run_host(kernel, example, repeat, with_torch=False))
            if row["rel_err"] >= TOLERANCE:
                problems.append(f"{name} host fused {fused}: relative error {row['rel_err']:.2e}")
        else:
            row.update(sw_figures(kernel))
        rows.append(row)
    return rows


def measure(name: str, target: str, repeat: int, with_torch: bool, problems: list[str]) -> dict[str, object]:
    import swauto

    example, params = OPERATORS[name]
    path = EXAMPLES / f"{example}.sw"
    started = time.perf_counter()
    space = len(swauto.schedules(path, params=params, target=target))
    space_s = time.perf_counter() - started
    threads = 1 if target == "host" else None
    started = time.perf_counter()
    kernel = swauto.compile(path, params=params, target=target, threads=threads)
    compile_s = time.perf_counter() - started
    if kernel.report["from_tuning_log"]:
        problems.append(f"{name} {target}: the cold compile was answered by the tuning log")
    started = time.perf_counter()
    warm = swauto.compile(path, params=params, target=target, threads=threads)
    warm_s = time.perf_counter() - started
    if warm.schedule != kernel.schedule:
        problems.append(f"{name} {target}: the warm compile picked another candidate")
    bound = kernel.operator.params
    shape = " ".join(f"{k}={v}" for k, v in bound.items())
    row: dict[str, object] = {
        "operator": name, "shape": shape, "target": target, "what": "model's pick", "space": space,
        "space_s": space_s, "compile_s": compile_s, "warm_compile_s": warm_s,
        "candidate": kernel.schedule.describe(), "flops": kernel.report["flops"],
        "predicted_s": kernel.report["predicted_s"],
    }
    if target == "host":
        row.update(run_host(kernel, example, repeat, with_torch))
        if row["rel_err"] >= TOLERANCE:
            problems.append(f"{name} host: relative error {row['rel_err']:.2e} against the float64 reference")
    else:
        row.update(sw_figures(kernel))
    return row


# --- output ---------------------------------------------------------------------------------------------


def fmt(value: object, digits: int = 4) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def ms(value: object) -> str:
    return "" if value in (None, "") else f"{1e3 * float(value):.4g}"  # type: ignore[arg-type]


def tables(rows: list[dict[str, object]]) -> list[str]:
    """The Markdown tables: spaces and tuning, host, SW26010, fusion."""
    picks = [r for r in rows if r["what"] == "model's pick"]
    out = ["## Space and model tuning (cold: empty cache folder; warm: from the tuning log)", "",
           "| operator | shape | target | space | space s | compile s (cold) | compile s (warm) | model's pick |",
           "|---|---|---|---|---|---|---|---|"]
    for r in picks:
        out.append(f"| {r['operator']} | {r['shape']} | {r['target']} | {r['space']} | {fmt(r['space_s'], 3)} | "
                   f"{fmt(r['compile_s'], 3)} | {fmt(r['warm_compile_s'], 2)} | {r['candidate']} |")
    host = [r for r in picks if r["target"] == "host"]
    if host:
        out += ["", "## Host, one thread: the model's pick against PyTorch (medians; ratio = PyTorch time / swauto "
                    "time, above 1: swauto faster)", "",
                "| operator | MFLOP | predicted ms | swauto ms | GFLOPS | GB/s | PyTorch ms | GFLOPS | GB/s | ratio | "
                "rel. error | PyTorch rel. error | PyTorch channels-last ms | ratio to it |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in host:
            out.append(f"| {r['operator']} | {fmt(r['flops'] / 1e6, 4)} | {ms(r['predicted_s'])} | "  # type: ignore[operator]
                       f"{ms(r['swauto_s'])} | "
                       f"{fmt(r['swauto_gflops'], 3)} | {fmt(r['swauto_GBps'], 3)} | {ms(r.get('torch_s'))} | "
                       f"{fmt(r.get('torch_gflops'), 3)} | {fmt(r.get('torch_GBps'), 3)} | "
                       f"{fmt(r.get('swauto_vs_torch'), 3)} | {fmt(r['rel_err'], 2)} | "
                       f"{fmt(r.get('torch_rel_err'), 2)} | {ms(r.get('torch_cl_s'))} | "
                       f"{fmt(r.get('swauto_vs_torch_cl'), 3)} |")
    sw = [r for r in picks if r["target"] == "sw26010"]
    if sw:
        out += ["", "## SW26010, one core group (timed simulator): the model's pick", "",
                "| operator | predicted ms | simulated ms | GFLOPS | % of peak | DMA MB | DMA GB/s | % of 30.94 GB/s |",
                "|---|---|---|---|---|---|---|---|"]
        for r in sw:
            out.append(f"| {r['operator']} | {ms(r['predicted_s'])} | {ms(r['simulated_s'])} | "
                       f"{fmt(r['sim_gflops'], 3)} | {fmt(r['peak_pct'], 3)} | "
                       f"{fmt(r['dma_bytes'] / 1e6, 4)} | {fmt(r['dma_GBps'], 3)} | "  # type: ignore[operator]
                       f"{fmt(r['dma_pct_peak'], 3)} |")
    fused = [r for r in rows if r["what"] != "model's pick"]
    if fused:
        out += ["", "## Fused against unfused: the model's best candidate of each fusion choice", "",
                "| operator | target | fusion | predicted ms | simulated ms (SW26010) / measured ms (host) | "
                "candidate |", "|---|---|---|---|---|---|"]
        for r in fused:
            actual = ms(r.get("simulated_s")) if r["target"] == "sw26010" else ms(r.get("swauto_s"))
            out.append(f"| {r['operator']} | {r['target']} | {r['what']} | {ms(r['predicted_s'])} | {actual} | "
                       f"{r['candidate']} |")
    return out


def write_csv(rows: list[dict[str, object]]) -> None:
    import csv

    with open(RESULTS / "operators.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({f: fmt(row.get(f), 6) if isinstance(row.get(f), float) else row.get(f, "")
                             for f in FIELDS})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operators", nargs="+", choices=list(OPERATORS), default=list(OPERATORS),
                        help="which operators (default: all seven shapes)")
    parser.add_argument("--targets", nargs="+", choices=("host", "sw26010"), default=["host", "sw26010"])
    parser.add_argument("--repeat", type=int, default=9, help="timed calls per median on the host (default 9)")
    parser.add_argument("--no-fusion", action="store_true", help="skip the fused-against-unfused comparison")
    parser.add_argument("--cache-dir", help="swauto's cache folder (default: a fresh temporary folder: cold)")
    args = parser.parse_args()
    steady_allocator()
    os.environ["SWAUTO_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="swauto-operators-")
    from swauto.tuner import host_model  # swauto is imported after SWAUTO_CACHE_DIR is set

    try:
        import torch

        with_torch = True
        versions = f"torch {torch.__version__}"
    except ImportError:
        with_torch = False
        versions = "PyTorch not installed: no PyTorch figures"
    started_all = time.perf_counter()
    calibration_s = 0.0
    if "host" in args.targets:
        started = time.perf_counter()
        host_model.machine()
        calibration_s = time.perf_counter() - started
    line = (f"{header()}  numpy {np.__version__}  {versions}  swauto cache {os.environ['SWAUTO_CACHE_DIR']}  "
            f"host calibration {calibration_s:.1f} s (not in the compile times)  medians of {args.repeat}")
    print(line, flush=True)
    rows: list[dict[str, object]] = []
    problems: list[str] = []
    for name in args.operators:
        example, params = OPERATORS[name]
        for target in args.targets:
            row = measure(name, target, args.repeat, with_torch, problems)
            rows.append(row)
            figures = (f"{1e3 * row['swauto_s']:.3f} ms {row['swauto_gflops']:.2f} GFLOPS, "  # type: ignore[operator]
                       f"torch {ms(row.get('torch_s'))} ms, ratio {fmt(row.get('swauto_vs_torch'), 3)}, "
                       f"err {row['rel_err']:.1e}" if target == "host" else
                       f"simulated {ms(row['simulated_s'])} ms, {fmt(row['peak_pct'], 3)}% of peak, "
                       f"DMA {fmt(row['dma_pct_peak'], 3)}% of peak bandwidth")
            print(f"{name:24} {target:8} space {row['space']:5} ({row['space_s']:.2f} s)  compile "
                  f"{row['compile_s']:.2f} s  {figures}", flush=True)
            if not args.no_fusion and example in FUSING:
                for fused in fusion_rows(name, example, params, target, str(row["shape"]), args.repeat, problems):
                    rows.append(fused)
                    actual = ms(fused.get("swauto_s") or fused.get("simulated_s"))
                    print(f"{'':24} {target:8} {fused['what']}: predicted {ms(fused['predicted_s'])} ms, "
                          f"{'measured' if target == 'host' else 'simulated'} {actual} ms", flush=True)
    total = time.perf_counter() - started_all
    notes = [
        "Produced by `benchmarks/operators.py` (its docstring says what each figure is). Host: one thread, the "
        "model's pick on random float32 inputs, checked against a float64 NumPy reference; PyTorch on one "
        "thread in inference mode, pooling and conv2d_bias_relu on NCHW copies made outside the timed region "
        "(and again on channels-last copies: NHWC in memory). "
        "GB/s: the bytes of the inputs and outputs over the time; predicted: the host model's time for the pick. "
        "SW26010: one core group, the timed simulator; "
        "DMA GB/s = dma_bytes / simulated_s. Fusion: the model ranks every legal candidate; the best of each "
        "fusion choice is compiled with `schedule=candidate` (in the CSV, such a row's `space` is the "
        "candidates of that fusion choice and `space_s` the time to build and rank the whole space). "
        f"Whole run: {total:.0f} s.",
    ]
    if problems:
        notes.append("Problems: " + "; ".join(problems) + ".")
    body = tables(rows)
    print()
    print("\n".join(body))
    for note in notes[1:]:
        print(note)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_csv(rows)
    text = ["# The example operators on both targets", "", line, "", *notes, "", *body]
    (RESULTS / "operators.md").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main()

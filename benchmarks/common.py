"""Helpers shared by the benchmarks: the header line (machine, date, command), CSV and
Markdown tables in benchmarks/results/."""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
WORKLOADS = ROOT.parent / "shared" / "workloads" / "cnn_conv_layers.csv"
NETWORKS = ROOT / "benchmarks" / "workloads" / "networks.csv"  # ResNet-18, MobileNetV2, Inception-v3


def machine_name() -> str:
    """The CPU's model name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header() -> str:
    """The command, the date, this machine (the simulator's host) and its core count."""
    command = "python " + " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv))
    cpu = machine_name()
    when = datetime.datetime.now().isoformat(timespec="seconds")
    return f"`{command}` — {when}  {cpu}  {os.cpu_count()} cores  Python {platform.python_version()}"


def write_tables(name: str, fields: Sequence[str], rows: Sequence[dict], title: str, notes: str = "",
                 group: str | None = None) -> None:
    """benchmarks/results/NAME.csv (all fields) and NAME.md (the header line, notes, a table; with
    `group`, a table per value of that field, each with the fields its rows have)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"{name}.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# {title}", "", header(), ""]
    if notes:
        lines += [notes, ""]
    groups = dict.fromkeys(row[group] for row in rows) if group else [None]
    for value in groups:
        chosen = [row for row in rows if group is None or row[group] == value]
        present = [f for f in fields if any(row.get(f, "") != "" for row in chosen)]
        if group:
            lines += [f"## {value}", ""]
        lines.append("| " + " | ".join(present) + " |")
        lines.append("|" + "---|" * len(present))
        for row in chosen:
            lines.append("| " + " | ".join(_cell(row.get(f, "")) for f in present) + " |")
        lines.append("")
    (RESULTS / f"{name}.md").write_text("\n".join(lines))


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def csv_number(text: str) -> object:
    """A CSV cell read back: an int or float where it is one, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file whose comment lines start with '#'."""
    with open(path) as source:
        return list(csv.DictReader(line for line in source if not line.startswith("#")))


def workload_layers(models: Sequence[str] | None = None) -> list[dict[str, str]]:
    """The rows of ../shared/workloads/cnn_conv_layers.csv (of `models` only, if given)."""
    return [row for row in csv_rows(WORKLOADS) if models is None or row["model"] in models]


def network_layers() -> list[dict[str, str]]:
    """The rows of benchmarks/workloads/networks.csv."""
    return csv_rows(NETWORKS)


# What makes two conv layers the same problem (networks.csv's columns; the workload list's square
# kernels and pads written out).
SHAPE = ("ci", "co", "in_hw", "kr", "kc", "stride", "pad_r", "pad_c", "groups")


def written_out(row: dict[str, str]) -> dict[str, str]:
    """A workload-list row with networks.csv's columns: kr = kc = k, pad_r = pad_c = pad, groups = 1."""
    return {**row, "kr": row["k"], "kc": row["k"], "pad_r": row["pad"], "pad_c": row["pad"], "groups": "1"}


def conv_layers() -> list[dict[str, str]]:
    """Every conv layer of the workload list (`written_out`) and of networks.csv, in file order."""
    workloads = [written_out(row) for row in csv_rows(WORKLOADS)] if WORKLOADS.exists() else []
    return workloads + network_layers()


def layer_shapes() -> list[dict[str, str]]:
    """Distinct conv layer shapes of `conv_layers`, in file order."""
    rows = conv_layers()
    seen, chosen = set(), []
    for row in rows:
        shape = tuple(row[k] for k in SHAPE)
        if shape not in seen:
            seen.add(shape)
            chosen.append(row)
    return chosen


def conv_example(layer: dict[str, str], batch: int) -> tuple[str, dict[str, int]] | None:
    """The example a `layer_shapes` row compiles from and its parameters at `batch`: `conv2d.sw` for a
    dense layer, `conv2d_depthwise.sw` for one of groups = channels; None for other groupings."""
    groups = int(layer["groups"])
    params = {"B": batch, "Ri": int(layer["in_hw"]), "Ci": int(layer["in_hw"]), "Kr": int(layer["kr"]),
              "Kc": int(layer["kc"]), "stride": int(layer["stride"]), "pad_r": int(layer["pad_r"]),
              "pad_c": int(layer["pad_c"])}
    if groups == 1:
        return "conv2d.sw", {**params, "Ni": int(layer["ci"]), "No": int(layer["co"])}
    if groups == int(layer["ci"]) == int(layer["co"]):
        return "conv2d_depthwise.sw", {**params, "C": groups}
    return None


Row = dict[str, object]


def over_layers(doc: str, name: str, title: str, fields: Sequence[str], layers: list[dict[str, str]],
                measure: Callable[[dict[str, str], int], Row], summary: Callable[[list[Row], list[int]], list[str]],
                plot: Callable[[list[Row], list[int]], None], batches: Sequence[int]) -> None:
    """A benchmark's main over workload layers: `--batches` (default `batches`) and `--layers N` (the
    first N), a row per batch and layer by `measure`, the summary printed and written with the
    tables results/NAME.{csv,md}, and `plot`'s figure."""
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--batches", nargs="+", type=int, default=list(batches))
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()
    tasks = [(layer, batch) for batch in args.batches for layer in layers[: args.layers]]
    rows = [measure(*task) for task in tqdm(tasks, desc="layers", unit="layer")]
    notes = summary(rows, args.batches)
    print(header())
    print("\n".join(notes))
    write_tables(name, fields, rows, title, notes="\n".join(notes))
    plot(rows, args.batches)


def box_plot_by_batch(rows: list[Row], batches: Sequence[int], column: str, ylabel: str, title: str,
                      name: str) -> None:
    """results/NAME.png: a box of `column` per batch, over the rows whose status is ok."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    axis.boxplot([[float(r[column]) for r in rows if r["B"] == batch and r["status"] == "ok"] for batch in batches])
    axis.set_xticks(range(1, len(batches) + 1), [f"B = {b}" for b in batches])
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(RESULTS / f"{name}.png", dpi=120)
    plt.close(figure)


def steady_allocator() -> None:
    """Keep memory that is freed in glibc's heap, to be handed out again: no fresh mapping per large
    allocation and no trimming. A library that allocates its outputs on each call (PyTorch) then does not
    page-fault through them on every call: a new 1.6 MB output made PyTorch's depthwise conv of
    MobileNetV2's first block take 2.4 ms instead of 0.24 here (1.5 µs per page). glibc raises its
    threshold for mapping by itself only once a large mapped block is freed, so without this the cost
    depends on what ran before in the process. swauto's kernels write into arrays they are given."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return  # not glibc
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest
    mallopt(m_trim_threshold, 1 << 30)


WARMUP = 3  # untimed calls of each function first


# On a shared guest another tenant sometimes holds a core for seconds: a two-thread run then measured
# every implementation at one core's speed (GEMM 512^3: the probe read 238.9 GFLOPS of two cores' 490).
BUSY_FRACTION = 0.75
RUNS = 3


def probed_run(run: Callable[[], dict], threads: int) -> dict:
    """`run`'s row (the probe's reading in `peak_gflops`), run again while the probe reads below
    `BUSY_FRACTION` of the FMA peak calibration measured on `threads` cores, up to `RUNS` times in all:
    the row of the highest reading, with how many runs it took (`runs`)."""
    from swauto.tuner.host_model import machine

    floor = BUSY_FRACTION * threads * machine().peak_flops / 1e9
    rows = [run()]
    while len(rows) < RUNS and rows[-1]["peak_gflops"] < floor:
        rows.append(run())
    return {**max(rows, key=lambda row: row["peak_gflops"]), "runs": len(rows)}


def settle(threads: int) -> float:
    """How long each turn of `median_seconds` on `threads` threads runs its function before the timed
    call: 0.2 s on more than one (a library's idle workers spin for about 0.1 s after a call and take the
    other core), none on one."""
    return 0.2 if threads > 1 else 0.0


def median_seconds(*functions, repeat: int, settle: float = 0.0) -> list[float]:
    """The median wall time of `repeat` calls of each function (`turn_seconds`)."""
    return [statistics.median(samples) for samples in turn_seconds(*functions, repeat=repeat, settle=settle)]


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median over turns of numerators[i] / denominators[i] (two functions' `turn_seconds`): both calls
    of a turn run in the same moment of a shared machine, which the median of the turns' ratios keeps
    together and the ratio of the two medians does not (on an Emerald Rapids guest, memory-bound layers'
    timings moved by 2x within minutes: MobileNetV2's block4.1.depthwise at B = 8 1.1 - 2.6 ms)."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


def turn_seconds(*functions, repeat: int, settle: float = 0.0) -> list[list[float]]:
    """The wall time of `repeat` calls of each function, after WARMUP calls of each, turn by turn: the
    functions take turns, so that a burst of load on this shared machine hits them alike: each round calls
    each function twice and times the second call (its data in the caches, as in back-to-back calls).

    With `settle`, each turn calls its function back to back for that many seconds and then times one
    call. A library whose idle threads spin after a call needs it: OpenBLAS's workers spin for about 0.1
    s after each `numpy.matmul`, and on two cores that halved the two-thread speed of whichever kernel ran
    next (swauto's and PyTorch's alike, 1024^3). The turn runs its own function meanwhile, rather than
    pausing: after 0.2 s without vector work (asleep, or in a Python loop) this virtual machine's cores
    ran slow for the next millisecond or so (on one thread, an in-register FMA loop's first call took
    116 us instead of 67, a 128^3 GEMM's 328 instead of 64 and its next five 107 - 120), and a turn
    after a pause timed that wake-up, not the kernels:
    128^3 on two threads, swauto, NumPy and PyTorch alike ran at 41 - 52 GFLOPS after a pause and three
    calls, 56 - 87 after 0.2 s of calls (2026-11-29, medians of 9)."""
    for function in functions:
        for _ in range(WARMUP):
            function()
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(repeat):
        for function, samples in zip(functions, times, strict=True):
            warm_until = time.perf_counter() + settle
            function()
            while time.perf_counter() < warm_until:
                function()
            started = time.perf_counter()
            function()
            samples.append(time.perf_counter() - started)
    return times

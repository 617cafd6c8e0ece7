"""The `swauto` command: compile, choose, schedules, run, tune, tune-model, calibrate. User errors print one
sentence and exit with 2."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from swauto import targets
from swauto.errors import ArgumentError, SwautoError
from swauto.frontend.integers import check_integer, parse_integer
from swauto.tuner.space import MAX_CANDIDATES

TOLERANCE = 1e-4  # max |error| / max |reference| that `swauto run` accepts
DEFAULT_TARGET = "host"  # compile and run
DEFAULT_SCHEDULES_TARGET = "sw26010"  # schedules
TUNE_TARGET = "sw26010"  # tune: the command drives the timed simulator's tuners, which only this target offers


def _define(text: str) -> tuple[str, int]:
    """`-D NAME=VALUE`: the value in plain decimal digits (its range is the checker's business)."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, parse_integer(value, f"the value of {name}")
    except ArgumentError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _layout(text: str) -> tuple[str, str]:
    """`--layout TENSOR=AXES`: a tensor and its declared axes in memory order, comma-separated."""
    name, sep, axes = text.partition("=")
    if not sep or not name.isidentifier() or not axes:
        raise argparse.ArgumentTypeError(f"expected TENSOR=AXIS,AXIS,..., got {text!r}")
    return name, axes


def _integer(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer option in plain decimal digits, at least `minimum` (argparse names
    the option in its message)."""

    def convert(text: str) -> int:
        try:
            return check_integer(parse_integer(text, "the value"), "the value", minimum)
        except ArgumentError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return convert


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swauto", description="A tensor compiler for deep-learning operators.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def operator_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("file", type=Path, help="the operator's .sw file")
        sub.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE",
                         help="bind a size parameter (repeatable, once per parameter)")
        sub.add_argument("--max-candidates", type=_integer(1), default=MAX_CANDIDATES,
                         metavar="N", help=f"refuse a schedule space of more than N candidates (default "
                                           f"{MAX_CANDIDATES:,})")
        return sub

    def target_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--target", choices=targets.names(), default=DEFAULT_TARGET)
        sub.add_argument("--schedule", metavar="ID", help="compile this candidate (an id from `swauto schedules`)")
        sub.add_argument("--tuner", choices=("model", "measure", "simulate", "hybrid"), default="model",
                         help="model: the analytic model; measure: time every candidate on the host; "
                              "simulate: time every candidate on the simulated sw26010; "
                              "hybrid: time the model's best few (host or simulator)")
        sub.add_argument("--threads", type=_integer(1), default=None,
                         help="the most host threads (default: all cores this process may use); one where the model "
                              "predicts a call too small to share, unless --schedule is given")

    def layout_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--layout", dest="layouts", action="append", type=_layout, default=[],
                         metavar="TENSOR=AXES", help="keep a tensor in one of the layouts its schedule allows: "
                                                     "its declared axes in memory order, e.g. input=Ri,Ci,B,Ni "
                                                     "(repeatable)")

    def constant_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--constant", dest="constants", action="append", default=[], metavar="TENSOR",
                         help="an input that does not change between calls (a weight): what is computed from "
                              "such inputs alone runs once, before the calls (repeatable)")

    compile_cmd = operator_command("compile", "compile an operator; print the chosen candidate and its report")
    target_options(compile_cmd)
    layout_option(compile_cmd)
    constant_option(compile_cmd)
    compile_cmd.add_argument("--dump-ir", action="store_true", help="print the IR after each pass")
    compile_cmd.add_argument("-o", dest="output", type=Path, help="write the generated code here")

    choose_cmd = commands.add_parser(
        "choose", help="compile the same operator written as several algorithms; keep the one the model "
                       "predicts fastest and say why",
        description="Compile each .sw file (the same parameters and tensors: for example examples/conv2d.sw, "
                    "conv2d_explicit.sw and conv2d_winograd.sw) and report the predicted time of each, the "
                    "choice and the reason.")
    choose_cmd.add_argument("files", type=Path, nargs="+", help="the algorithms' .sw files")
    choose_cmd.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE",
                            help="bind a size parameter (repeatable, once per parameter)")
    choose_cmd.add_argument("--max-candidates", type=_integer(1), default=MAX_CANDIDATES, metavar="N",
                            help=f"refuse a schedule space of more than N candidates (default {MAX_CANDIDATES:,})")
    target_options(choose_cmd)
    constant_option(choose_cmd)

    schedules_cmd = operator_command("schedules", "count the schedule space, the rejections by reason, and list "
                                                  "the candidates")
    schedules_cmd.add_argument("--target", choices=targets.names(), default=DEFAULT_SCHEDULES_TARGET,
                               help=f"whose legality rules and cost to use (default {DEFAULT_SCHEDULES_TARGET})")

    run_cmd = operator_command("run", "compile, run on random inputs and compare with the NumPy reference")
    target_options(run_cmd)
    layout_option(run_cmd)
    constant_option(run_cmd)
    run_cmd.add_argument("--repeat", type=_integer(1), default=5,
                         help="timed calls on the host (median is shown)")
    run_cmd.add_argument("--seed", type=_integer(0), default=0, help="random seed of the inputs (>= 0)")

    # --- sw26010 tuning on the timed simulator (issue 4) ---
    tune_cmd = operator_command("tune", "tune on the simulated sw26010: the best candidates with predicted and "
                                        "simulated time, GFLOPS, percent of peak, and the tuning time")
    tune_cmd.add_argument("--target", choices=(TUNE_TARGET,), default=TUNE_TARGET)
    tune_cmd.add_argument("--tuner", choices=("model", "simulate", "hybrid"), default="model",
                          help="model: rank by the analytic model; simulate: time every candidate on the timed "
                               "simulator; hybrid: time the model's best --top")
    tune_cmd.add_argument("--top", type=_integer(1), default=None,
                          help="candidates the hybrid tuner simulates (default 8)")
    tune_cmd.add_argument("--show", type=_integer(1), default=10, help="rows of the table (default 10)")
    tune_cmd.add_argument("--plot", type=Path, metavar="FILE.png",
                          help="draw predicted against simulated time for every candidate (simulates them all)")

    model_cmd = commands.add_parser(
        "tune-model", help="tune every layer of an ONNX model; print a per-layer table",
        description="Read an ONNX model, compile each distinct layer once with the operator library, and print "
                    "per layer the operator, the candidate, its time, GFLOPS and percent of peak, and on the host "
                    "onnxruntime's time for the node alone and the error against it.")
    model_cmd.add_argument("model", type=Path, help="the .onnx file")
    model_cmd.add_argument("--target", choices=targets.names(), default=DEFAULT_TARGET)
    model_cmd.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="batch=N",
                           help="the batch (the first dimension of the model's inputs)")
    model_cmd.add_argument("--tuner", choices=("model", "measure", "simulate", "hybrid"), default="model")
    model_cmd.add_argument("--threads", type=_integer(1), default=None,
                           help="the most host threads (default: all cores this process may use); each layer on one "
                                "where the model predicts its call too small to share")
    model_cmd.add_argument("--repeat", type=_integer(1), default=5, help="timed calls per layer (the median is shown)")
    model_cmd.add_argument("--jobs", type=_integer(1), default=None,
                           help="processes that tune layers at once (default: the cores this process may use)")
    model_cmd.add_argument("--cluster", metavar="ADDRESS",
                           help="tune the layers on the workers of this Dask cluster (tcp://host:port)")
    model_cmd.add_argument("--no-compare", dest="compare", action="store_false",
                           help="do not run onnxruntime beside each layer")
    model_cmd.add_argument("--no-winograd", dest="winograd", action="store_false",
                           help="run every 3 x 3 layer on the implicit convolution (Winograd's round more)")
    model_cmd.add_argument("--plot", type=Path, metavar="FILE.png", help="draw each layer's GFLOPS")

    commands.add_parser("calibrate", help="measure this machine again for the host model and keep the result",
                        description="Measure the host's constants for the host model again (up to about a minute) and "
                                    "store them for later compiles.")
    return parser


def _progress(what: str):
    """A progress bar on standard error for long loops (quiet when standard error is not a terminal)."""
    from tqdm import tqdm

    return lambda items: tqdm(items, desc=what, unit=" candidates", disable=None, leave=False)


def _params(args: argparse.Namespace) -> dict[str, int]:
    """The -D bindings; a parameter given twice is refused rather than silently overwritten."""
    params: dict[str, int] = {}
    for name, value in args.defines:
        if name in params:
            raise ArgumentError(f"parameter {name} is given twice (-D {name}={params[name]} and -D {name}={value})")
        params[name] = value
    return params


def _layouts(args: argparse.Namespace) -> dict[str, str]:
    """The --layout options; a tensor given twice is refused rather than silently overwritten."""
    layouts: dict[str, str] = {}
    for name, axes in args.layouts:
        if name in layouts:
            raise ArgumentError(f"tensor {name} is laid out twice (--layout {name}={layouts[name]} and "
                                f"--layout {name}={axes})")
        layouts[name] = axes
    return layouts


def _check_writable(path: Path, option: str) -> None:
    """Refuse, before any work, an output path that cannot be a file we write."""
    if path.is_dir():
        raise ArgumentError(f"{option} {path} is a directory; give a file name")
    folder = path.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise ArgumentError(f"{option} {path}: {folder} {why}")
    if not os.access(folder, os.W_OK) or path.exists() and not os.access(path, os.W_OK):
        raise ArgumentError(f"{option} {path}: permission denied")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as error:
        raise SwautoError(f"cannot write {path}: {error.strerror}") from None


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's MemAvailable, else the free pages), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _check_run_memory(op) -> None:
    """Refuse, before compiling, a `run` whose arrays do not fit in the available memory: the float32
    tensors, their float64 copies for the reference, and two float32 copies of the outputs."""
    tensors = sum(4 * math.prod(t.shape) for t in op.seed.tensors)
    outputs = sum(4 * math.prod(t.shape) for t in op.seed.tensors if t.is_output)
    needed = 3 * tensors + 2 * outputs
    available = _available_memory()
    if available is not None and needed > available:
        gib = 1 << 30
        raise SwautoError(
            f"`run` would allocate {needed / gib:.1f} GiB ({tensors / gib:.1f} GiB of float32 tensors, their "
            f"float64 copies for the reference and copies of the outputs) but {available / gib:.1f} GiB of memory "
            f"is available; choose smaller sizes"
        )


def _print_report(report: dict) -> None:
    print(f"candidate  {report['candidate']}  {report['schedule']}")
    print(f"target     {report['target']}   params {report['params']}")
    print(f"flops      {report['flops']:.4g}   DMA bytes {report['dma_bytes']:.4g}")
    print(f"predicted  {report['predicted_s'] * 1e3:.4g} ms  {report['predicted_gflops']:.1f} GFLOPS  "
          f"{100 * report['predicted_peak_fraction']:.1f}% of peak  ({targets.get(report['target']).model_name})")
    if "simulated_s" in report:
        print(f"simulated  {report['simulated_s'] * 1e3:.4g} ms  {report['gflops']:.1f} GFLOPS  "
              f"{100 * report['peak_fraction']:.1f}% of peak  (timed simulator)")
    if "prologue_predicted_s" in report:
        print(f"prologue   {report['prologue_predicted_s'] * 1e3:.4g} ms predicted, once for the constants")
    print(f"tuning     {report['tuning_s']:.3f} s")


def _compile(args: argparse.Namespace) -> int:
    import swauto
    from swauto.ir.printer import format_module

    if args.output is not None:
        _check_writable(args.output, "-o")
    kernel = swauto.compile(args.file, _params(args), target=args.target, schedule=args.schedule,
                            tuner=args.tuner, threads=args.threads, max_candidates=args.max_candidates,
                            layouts=_layouts(args), constants=args.constants)
    if args.dump_ir:
        for stage, module in kernel.stages:
            print(f"=== IR after {stage} ===")
            print(format_module(module))
    _print_report(kernel.report)
    if args.output is not None:
        _write(args.output, kernel.code)
        print(f"wrote      {args.output}")
    return 0


def _choose(args: argparse.Namespace) -> int:
    import swauto

    if args.schedule is not None:
        raise ArgumentError("--schedule names one candidate of one file; choose compiles several files")
    kernel = swauto.choose(args.files, _params(args), target=args.target, tuner=args.tuner, threads=args.threads,
                           max_candidates=args.max_candidates, constants=args.constants)
    ran = args.tuner != "model"  # then the choice compared each pick's time where the tuner runs candidates
    print(f"{'algorithm':24}  {'predicted ms':>12}  " + (f"{'run ms':>12}  " if ran else "") + "candidate")
    for alternative in kernel.report["alternatives"]:
        if alternative["applies"]:
            print(f"{alternative['operator']:24}  {alternative['predicted_s'] * 1e3:12.4f}  "
                  + (f"{alternative['seconds'] * 1e3:12.4f}  " if ran else "") + alternative["schedule"])
        else:
            print(f"{alternative['operator']:24}  {'-':>12}  " + (f"{'-':>12}  " if ran else "")
                  + f"does not apply: {alternative['reason']}")
    print(f"chosen     {kernel.report['why']}")
    _print_report(kernel.report)
    return 0


def _schedules(args: argparse.Namespace) -> int:
    from swauto.api import load
    from swauto.tuner.space import explore

    op = load(args.file, _params(args))
    target = targets.get(args.target)
    space = explore(op, target.machine(), progress=_progress("building candidates"),
                    max_candidates=args.max_candidates)
    print(f"operator {op.name} {op.params} on {args.target}: {space.total} candidates, {len(space.legal)} legal")
    for reason, count in space.rejected.most_common():
        print(f"  rejected {count:6d}  {reason}")
    print(f"{'id':8}  {'predicted ms':>12}  schedule")
    for candidate, stages in space.legal:
        seconds = target.estimate(stages, 1, candidate.micro_kernel).seconds
        print(f"{candidate.id}  {seconds * 1e3:12.4f}  {candidate.describe()}")
    return 0


def _run(args: argparse.Namespace) -> int:
    import swauto
    from swauto.api import load
    from swauto.reference import reference

    params = _params(args)
    op = load(args.file, params)
    _check_run_memory(op)
    kernel = swauto.compile(args.file, params, target=args.target, schedule=args.schedule,
                            tuner=args.tuner, threads=args.threads, max_candidates=args.max_candidates,
                            layouts=_layouts(args), constants=args.constants)
    _print_report(kernel.report)
    rng = np.random.default_rng(args.seed)
    arrays = {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in kernel.shapes.items()}
    expected = reference(op, arrays)
    outputs = {name: arrays[name].copy() for name in expected}
    kernel(**{**arrays, **outputs})
    worst = max(float(np.abs(outputs[n] - expected[n]).max() / max(np.abs(expected[n]).max(), 1e-30))
                for n in expected)
    target = targets.get(args.target)
    if target.threaded:  # time calls here, on the constants prepared once (all of it without constants)
        prepared = kernel.prepare(**{name: arrays[name] for name in kernel.constants})
        arrays = {name: array for name, array in arrays.items() if name not in kernel.constants}
        times = []
        for _ in range(args.repeat):
            scratch = {name: arrays[name].copy() for name in expected}
            started = time.perf_counter()
            prepared(**{**arrays, **scratch})
            times.append(time.perf_counter() - started)
        seconds = float(np.median(times))
        print(f"measured   {seconds * 1e3:.4g} ms  {kernel.report['flops'] / seconds / 1e9:.2f} GFLOPS "
              f"(median of {len(times)} calls on the host)")
    else:  # the target timed the call itself (a simulator)
        for line in target.describe_call(kernel.report):
            print(line)
    verdict = "ok" if worst <= TOLERANCE else "MISMATCH"
    print(f"max error  {worst:.3g} relative to the NumPy float64 reference: {verdict}")
    return 0 if worst <= TOLERANCE else 1


def _tune(args: argparse.Namespace) -> int:
    from swauto.api import load
    from swauto.ir.analysis import traffic
    from swauto.tuner.simulate import HYBRID_TOP, simulate_all, tune
    from swauto.tuner.space import explore

    if args.plot is not None:
        _check_plot_path(args.plot)
    started = time.perf_counter()
    op = load(args.file, _params(args))
    target = targets.get(args.target)
    space = explore(op, target.machine(), progress=_progress("building candidates"),
                    max_candidates=args.max_candidates)
    explore_s = time.perf_counter() - started
    top = {"model": 0, "simulate": None, "hybrid": args.top or HYBRID_TOP}[args.tuner]
    tuning = tune(space, top, progress=_progress("simulating"))
    tuned_s = explore_s + tuning.model_s + tuning.simulate_s
    results = tuning.results
    if args.tuner == "model":  # the model alone chose; simulate the rows shown, to judge it
        results = simulate_all([r.ranked for r in results[:args.show]]) + results[args.show:]
    flops = traffic(op.seed)[1]
    print(f"operator {op.name} {op.params}: {len(space.legal)} legal candidates; tuner {args.tuner}")
    print(f"{'#':>3}  {'id':8}  {'predicted ms':>12}  {'simulated ms':>12}  {'GFLOPS':>7}  {'% peak':>6}  schedule")
    for place, result in enumerate(results[:args.show], 1):
        simulated = result.simulated_s
        gflops = flops / simulated / 1e9
        print(f"{place:3d}  {result.ranked.candidate.id}  {result.predicted_s * 1e3:12.4f}  {simulated * 1e3:12.4f}  "
              f"{gflops:7.1f}  {100 * gflops * 1e9 / target.peak_flops(1):6.1f}  {result.ranked.candidate.describe()}")
    print(f"tuning     {tuned_s:.3f} s (space {explore_s:.3f} s, model {tuning.model_s:.3f} s, "
          f"simulation {tuning.simulate_s:.3f} s)")
    if args.plot is not None:
        everything = simulate_all([r.ranked for r in results], _progress("simulating for the plot"))
        _plot(everything, args.plot, f"{op.name} {op.params}")
        print(f"wrote      {args.plot}")
    return 0


def _tune_model(args: argparse.Namespace) -> int:
    from swauto.models import tune_model

    params = _params(args)
    unknown = sorted(set(params) - {"batch"})
    if unknown:
        raise ArgumentError(f"tune-model takes one parameter, -D batch=N; got -D {unknown[0]}")
    if args.plot is not None:
        _check_plot_path(args.plot)
    tuning = tune_model(args.model, target=args.target, batch=params.get("batch"), threads=args.threads,
                        tuner=args.tuner, repeat=args.repeat, compare=args.compare, jobs=args.jobs,
                        cluster=args.cluster, winograd=args.winograd)
    print(tuning.table())
    print(tuning.summary())
    if args.plot is not None:
        try:
            tuning.plot(args.plot)
        except OSError as error:
            raise SwautoError(f"cannot write {args.plot}: {error.strerror}") from None
        print(f"wrote      {args.plot}")
    return 0


def _check_plot_path(path: Path) -> None:
    """Refuse, before tuning, a --plot path that cannot be written or whose format matplotlib lacks."""
    from matplotlib.figure import Figure

    _check_writable(path, "--plot")
    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        known = ", ".join(f".{name}" for name in sorted(formats))
        raise ArgumentError(f"--plot {path}: matplotlib writes files ending in {known}")


def _plot(results: list, path: Path, title: str) -> None:
    """Predicted (the model) against simulated time of every candidate, on log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    predicted = [r.predicted_s * 1e3 for r in results]
    simulated = [r.simulated_s * 1e3 for r in results]
    figure, axes = plt.subplots(figsize=(6, 5))
    axes.loglog(simulated, predicted, ".", markersize=3)
    line = [min(simulated + predicted), max(simulated + predicted)]
    axes.plot(line, line, "k-", linewidth=0.8)
    axes.set(xlabel="simulated time (ms)", ylabel="predicted time (ms)", title=title)
    axes.title.set_fontsize(8)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as error:
        raise SwautoError(f"cannot write {path}: {error.strerror}") from None
    finally:
        plt.close(figure)


def _calibrate(args: argparse.Namespace) -> int:
    """Measure the host model's constants again and say what was measured."""
    import dataclasses

    from swauto.tuner.host_model import recalibrate

    machine = recalibrate()  # says that it measures, before it does (`_StderrLog`)
    print("calibrated the host model on this machine:")
    for name, value in dataclasses.asdict(machine).items():
        print(f"  {name:28} {value:.4g}" if isinstance(value, float) else f"  {name:28} {value}")
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """Warnings (a cache bypassed, a calibration redone) as one line, like errors."""
    print(f"swauto: warning: {message}", file=sys.stderr)


class _StderrLog(logging.Handler):
    """The `swauto` logger's notes on stderr, as `swauto: <note>` (e.g. that the host's calibration is
    measured, up to about a minute without other output). `sys.stderr` is looked up at each note, not kept."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"swauto: {record.getMessage()}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    logger = logging.getLogger("swauto")
    if not any(isinstance(handler, _StderrLog) for handler in logger.handlers):
        logger.addHandler(_StderrLog())
        logger.setLevel(logging.INFO)
    args = _parser().parse_args(argv)
    commands = {"compile": _compile, "choose": _choose, "schedules": _schedules, "run": _run, "tune": _tune,
                "tune-model": _tune_model, "calibrate": _calibrate}
    command = commands[args.command]
    try:
        return command(args)
    except SwautoError as error:
        print(f"swauto: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. `| head`) went away: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("swauto: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""Where a host kernel's time goes, instruction by instruction: a sampling profile of the generated code.

Compiles an operator for the host (a `.sw` file with -D, a GEMM shape, or a benchmark conv layer), calls
it for a few seconds under `perf record` (the software clock: no hardware counters needed, so it works in
virtual machines), and maps every sample taken while the calls ran back to the kernel's machine code,
disassembled with objdump. It prints what share of the time went to the generated code, to the OpenMP
runtime (threads waiting), to libc (LLVM's memcpy and memset calls), to Python between calls (and, on
several threads, the same per thread), and, per innermost loop of the generated code, its share and its
hottest instructions (a sample lands on the instruction after the one that stalled, or on it).

    python benchmarks/profile_host.py --gemm 2048 --threads 1
    python benchmarks/profile_host.py --conv resnet50/res2_3x3 --batch 8 --threads 2
    python benchmarks/profile_host.py examples/gemm.sw -D M=1024 -D N=1024 -D K=1024 --schedule 11237296

Needs Linux `perf` (perf_event_paranoid at most 2) and binutils' `objdump`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swauto.api import Kernel

# A jump (`jmp`, `jne`, ...) to an address, as objdump prints it.
_JUMP = re.compile(r"^j\w+\s+([0-9a-f]+)\s+<")
_FUNCTION = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
_INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
# A sample of `perf script -F tid,time,ip,sym,dso`: thread, time, address, symbol, (library).
_SAMPLE = re.compile(r"^\s*(\d+)\s+([\d.]+):\s+([0-9a-f]+)\s+(.*?)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class Instruction:
    address: int  # offset in the object's text
    text: str


@dataclass(frozen=True)
class Loop:
    """An innermost loop of the machine code: its instructions run from `start` to the backward jump at `end`."""

    function: str
    start: int
    end: int


def parse_objdump(text: str) -> dict[str, list[Instruction]]:
    """The instructions of each function of `objdump -d --no-show-raw-insn` output."""
    functions: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    for line in text.splitlines():
        if match := _FUNCTION.match(line.strip()):
            current = functions.setdefault(match.group(2), [])
        elif current is not None and (match := _INSTRUCTION.match(line)):
            current.append(Instruction(int(match.group(1), 16), match.group(2).strip()))
    return functions


def innermost_loops(functions: dict[str, list[Instruction]]) -> list[Loop]:
    """Each backward jump's range [target, jump] that holds no other such range: the innermost loops."""
    ranges = []
    for name, instructions in functions.items():
        for instruction in instructions:
            match = _JUMP.match(instruction.text)
            if match and int(match.group(1), 16) <= instruction.address:
                ranges.append(Loop(name, int(match.group(1), 16), instruction.address))
    return [loop for loop in ranges
            if not any(other != loop and loop.start <= other.start and other.end <= loop.end for other in ranges)]


@dataclass(frozen=True)
class Sample:
    thread: int
    time: float
    ip: int
    dso: str
    symbol: str


def parse_perf_script(text: str) -> list[Sample]:
    """The samples of `perf script -F tid,time,ip,sym,dso` output."""
    samples = []
    for line in text.splitlines():
        if match := _SAMPLE.match(line):
            samples.append(Sample(int(match.group(1)), float(match.group(2)), int(match.group(3), 16), match.group(5),
                                  match.group(4)))
    return samples


def where(sample: Sample, code: tuple[int, int]) -> str:
    """The part of the process a sample fell in: the generated code (`code`: its first and last address),
    the OpenMP runtime, libc (by symbol), Python, the OS kernel, or another library."""
    if code[0] <= sample.ip < code[1]:
        return "generated code"
    dso = Path(sample.dso).name
    if "gomp" in dso:
        return "OpenMP runtime (threads waiting or handing over)"
    if dso.startswith("libc."):
        return f"libc {sample.symbol.split('+')[0]}"
    if "python" in dso:  # the interpreter and extension modules (*.cpython-*.so)
        return "Python (between calls)"
    if "kernel" in dso:
        return "operating system"
    return f"other: {dso}"


def report(samples: list[Sample], functions: dict[str, list[Instruction]], addresses: dict[str, int],
           top: int = 3) -> list[str]:
    """Lines saying where `samples` fell: by part of the process, then per innermost loop of the generated
    code (functions loaded at `addresses`, by name) with its hottest instructions."""
    # The object's functions are loaded together: each at the same distance from its place in the object.
    offsets = {addresses[name] - instructions[0].address
               for name, instructions in functions.items() if name in addresses and instructions}
    if len(offsets) != 1:
        return ["the kernel's functions were not found at one offset from their places in its object code"]
    offset = offsets.pop()
    every = [i.address for instructions in functions.values() for i in instructions]
    code = (offset + min(every), offset + max(every) + 16)  # an x86 instruction is at most 15 bytes
    places = [where(sample, code) for sample in samples]
    parts = Counter(places)
    total = len(places)
    if not total:
        return ["no samples fell while the kernel ran"]
    lines = [f"{count / total:6.1%}  {part}" for part, count in parts.most_common() if count / total >= 0.005]
    if rest := sum(count for count in parts.values() if count / total < 0.005):
        lines.append(f"{rest / total:6.1%}  elsewhere (each part under 0.5%)")
    threads = Counter(sample.thread for sample in samples)
    if len(threads) > 1:  # who waits for whom: the calling thread runs Python between calls, the others wait
        calling = min(threads)  # the process's first thread (its id is the process's) makes the calls
        for thread in sorted(threads, key=lambda t: (t != calling, -threads[t])):
            own = Counter(place for sample, place in zip(samples, places, strict=True) if sample.thread == thread)
            shares = ", ".join(f"{part.split(' (')[0]} {count / threads[thread]:.0%}"
                               for part, count in own.most_common(3))
            lines.append(f"        thread {thread}{' (calling)' if thread == calling else ''}: {shares}")
    hits = Counter(sample.ip - offset for sample in samples if code[0] <= sample.ip < code[1])
    text = {i.address: i.text for instructions in functions.values() for i in instructions}
    loops = innermost_loops(functions)
    counts = {loop: sum(n for a, n in hits.items() if loop.start <= a <= loop.end) for loop in loops}
    lines.append("innermost loops of the generated code (share of all samples; hottest instructions):")
    for loop in sorted(loops, key=counts.__getitem__, reverse=True):
        count = counts[loop]
        if count / total < 0.01:
            continue
        instructions = sum(1 for a in text if loop.start <= a <= loop.end)
        lines.append(f"{count / total:6.1%}  {loop.function} +{loop.start:#x}..{loop.end:#x} "
                     f"({instructions} instructions)")
        hottest = sorted(((n, a) for a, n in hits.items() if loop.start <= a <= loop.end), reverse=True)[:top]
        lines.extend(f"          {n / total:6.1%}  +{a:#x}  {text.get(a, '?')}" for n, a in hottest)
    outside = {a: n for a, n in hits.items() if not any(loop.start <= a <= loop.end for loop in loops)}
    lines.append(f"{sum(outside.values()) / total:6.1%}  generated code outside its innermost loops")
    hottest = sorted(((n, a) for a, n in outside.items()), reverse=True)[:top]
    lines.extend(f"          {n / total:6.1%}  +{a:#x}  {text.get(a, '?')}" for n, a in hottest)
    return lines


def _kernel(args: argparse.Namespace) -> tuple[Kernel, Callable[[], object]]:
    """The compiled kernel and a function that calls it once on random inputs."""
    import numpy as np

    import swauto

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    constants: list[str] = []
    if args.gemm:
        from host_gemm import gemm_source, parse_shape
        m, n, k = parse_shape(args.gemm)
        source, params = gemm_source(m, n, k), {"M": m, "N": n, "K": k}
    elif args.conv:
        from common import conv_example, conv_layers
        from host_conv import overwriting
        layers = {f"{row['model']}/{row['layer']}": row for row in conv_layers()}
        if args.conv not in layers:
            raise SystemExit(f"no conv layer {args.conv} in the benchmark list")
        example, params = conv_example(layers[args.conv], args.batch)
        source, constants = overwriting(example), ["weight"]
    else:
        source = Path(args.file).read_text()
        params = {name: int(value) for name, value in (d.split("=", 1) for d in args.define)}
    schedule = None
    if args.schedule:
        schedule = next((c for c in swauto.schedules(source, params, target="host") if c.id == args.schedule), None)
        if schedule is None:
            raise SystemExit(f"no candidate {args.schedule} in the schedule space")
    kernel = swauto.compile(source, params, target="host", threads=args.threads, schedule=schedule,
                            constants=constants)
    rng = np.random.default_rng(0)
    # Constant inputs in their declared shapes, the others as the kernel keeps them (its chosen layouts).
    run = kernel.prepare(**{name: rng.standard_normal(kernel.operator.seed.tensor(name).shape).astype(np.float32)
                            for name in constants}) if constants else kernel
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32)
              for t in kernel.module.tensors if t.name not in constants}
    return kernel, lambda: run.run_arranged(**arrays)


def child(args: argparse.Namespace) -> None:
    """Compile, write the object code and what the report needs, then call the kernel for `args.seconds`."""
    kernel, call = _kernel(args)
    program = kernel.program
    folder = Path(args.child)
    (folder / "kernel.o").write_bytes(program.object_code)
    call()
    started, calls = time.clock_gettime(time.CLOCK_MONOTONIC), 0
    while time.clock_gettime(time.CLOCK_MONOTONIC) - started < args.seconds:
        call()
        calls += 1
    ended = time.clock_gettime(time.CLOCK_MONOTONIC)
    (folder / "kernel.json").write_text(json.dumps({
        "addresses": {program.plan.symbols[phase]: address for phase, address in program.addresses.items()},
        "started": started, "ended": ended, "calls": calls, "candidate": kernel.schedule.describe(),
        "threads": kernel.threads, "flops": kernel.report["flops"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="an operator's .sw file (with -D)")
    parser.add_argument("-D", dest="define", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--gemm", help="a GEMM shape of benchmarks/host_gemm.py: 2048 or 4096x64x64")
    parser.add_argument("--conv", help="a benchmark conv layer: model/layer (benchmarks/host_conv.py's list)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--schedule", help="a candidate id (`swauto schedules`); default: the model's pick")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--top", type=int, default=3, help="hottest instructions shown per loop")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if sum(bool(x) for x in (args.file, args.gemm, args.conv)) != 1:
        parser.error("give one of: a .sw file, --gemm, --conv")
    if args.child:
        child(args)
        return
    missing = [tool for tool in ("perf", "objdump") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"profile_host.py needs {' and '.join(missing)} (Linux perf, binutils)")
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "perf.data"
        record = ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "cpu-clock", "-F", "2000", "-o", str(data),
                  "--", sys.executable, __file__, *sys.argv[1:], "--child", folder]
        recorded = subprocess.run(record, check=False).returncode == 0
        if not (Path(folder) / "kernel.json").exists():
            sys.exit("the profiled run failed (above)" if recorded or data.exists() else
                     "perf record failed (is /proc/sys/kernel/perf_event_paranoid above 2?)")
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,time,ip,sym,dso"],
                                capture_output=True, text=True, check=True).stdout
        disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(Path(folder) / "kernel.o")],
                                     capture_output=True, text=True, check=True).stdout
        run = json.loads((Path(folder) / "kernel.json").read_text())
    samples = [s for s in parse_perf_script(script) if run["started"] <= s.time <= run["ended"]]
    seconds = run["ended"] - run["started"]
    rate = f", {run['flops'] * run['calls'] / seconds / 1e9:.1f} GFLOPS" if run["flops"] else ""
    print(f"{run['candidate']}\n{run['threads']} thread(s): {run['calls']} calls in {seconds:.1f} s{rate}; "
          f"{len(samples)} samples")
    print("\n".join(report(samples, parse_objdump(disassembly), run["addresses"], args.top)))


if __name__ == "__main__":
    main()

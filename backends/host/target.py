"""The host target: kernels JIT-compiled for this CPU (LLVM) and run on its cores, ranked by the host model
(`swauto.tuner.host_model`, with this machine's measured constants) or timed here (`swauto.tuner.measure`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from swauto import targets
from swauto.frontend.check import BoundOperator
from swauto.ir.analysis import traffic
from swauto.ir.nodes import Module
from swauto.machine import HostScratchpad, LocalMemoryMachine
from swauto.pipeline import Stages, before_double_buffering
from swauto.schedule.candidate import Candidate
from swauto.tuner import host_model, measure
from swauto.tuner.cost_model import Estimate
from swauto.tuner.sketch import SketchModel
from swauto.tuner.space import explore

from .jit import compile_module
from .program import HostProgram


def machine() -> HostScratchpad:
    """The host as the scheduler sees it, exploring the register tiles its calibration measured fastest
    for the instruction set its kernels are compiled for (known at run time only), its buffers bounded
    by this CPU's L2 (`HostScratchpad.ldm_bytes`), a map's buffer beyond half of it (the host model's L2
    level) out of the cache (`HostScratchpad.cache_bytes`)."""
    calibrated = host_model.machine()
    return HostScratchpad(ldm_bytes=HostScratchpad.L2_MULTIPLE * calibrated.l2_bytes,
                          micro_kernels=calibrated.register_tiles, cache_bytes=calibrated.l2_bytes // 2)


def estimate(stages: Stages, threads: int, micro_kernel: tuple[int, int] | None = None) -> Estimate:
    """The host model's prediction for `threads` cores, the GEMMs in the register tile `micro_kernel` (None:
    the calibration's first; the host has no asynchronous DMA: a packing copy is the core's own work, so
    the model's total is the figure)."""
    module = before_double_buffering(stages)
    dma_bytes, flops = traffic(module)
    host = host_model.estimate(module, threads, host_model.machine(), tile=micro_kernel)
    return Estimate(dma_bytes, flops, min(host.traffic, host.seconds), host.seconds, transfers=host.copies)


def sketch_model(threads: int) -> SketchModel:
    """The host model on candidates' sketches for `threads` cores, with this machine's calibration read
    once (the host never double buffers; its threads share the outermost loops, so on more than one the
    order of those matters; everywhere, which loop runs innermost, in the nest and around each transfer:
    `host_model._fetched_broadcast`, `host_model._restarted_runs`)."""
    calibrated = host_model.machine()
    return SketchModel(
        price=lambda sketch, double_buffered, peeled: host_model.estimate(sketch, threads, calibrated, peeled,
                                                                          verify=False).seconds,
        bound=lambda nest: host_model.least_seconds(nest, threads, calibrated),
        call_seconds=lambda call: host_model.call_seconds(call, calibrated),
        commuting=threads == 1, innermost=True)


def peak_flops(threads: int) -> float:
    """`threads` cores of this host, each at the in-register FMA peak its calibration measured (per core
    times threads: cores share nothing an in-register loop uses, so it is the bound; when all cores are busy
    their clock may drop a few percent, which makes a report's percent a little low, never above 100)."""
    return host_model.machine().peak_flops * threads


def build(module: Module, candidate: Candidate) -> HostProgram:
    """The candidate's final IR compiled (through the JIT's disk cache) with its micro-kernel, C tiles in
    place or copied as calibration measured faster here."""
    return compile_module(module, knobs=host_model.machine().knobs(candidate.micro_kernel))


def tune(op: BoundOperator, tuner: str, threads: int, machine: LocalMemoryMachine,
         max_candidates: int) -> tuple[Candidate, Stages]:
    """`measure`: time every legal candidate on this host; `hybrid`: the host model's best few."""
    top = measure.HYBRID_TOP if tuner == "hybrid" else None
    best = measure.tune(explore(op, machine, max_candidates=max_candidates), threads, host_model.machine(),
                        top=top)[0]
    return best.candidate, best.stages


def run_seconds(module: Module, candidate: Candidate, threads: int) -> float:
    """The median of 5 calls of the candidate's kernel on `threads` cores of this host, on random inputs."""
    return measure.time_module(module, threads, runs=5, knobs=host_model.machine().knobs(candidate.micro_kernel))


def report(module: Module, flops: int) -> Mapping[str, Any]:
    """Nothing beyond the common figures: a call is measured when it runs."""
    return {}


def calibration() -> str:
    """This machine's calibration as the tuning log keys on it: every constant the host model and the
    space read (a calibration measured apart, under another program's load, is another key)."""
    return json.dumps(asdict(host_model.machine()), sort_keys=True)


def describe_call(report: Mapping[str, Any]) -> list[str]:
    """Nothing: `swauto run` times the calls on the host itself."""
    return []


TARGET = targets.register(targets.Target(
    name="host",
    description="this CPU: LLVM-compiled kernels on its cores",
    machine=machine,
    tuners=("model", "measure", "hybrid"),
    model_name="host model",
    runs_on="the host",
    tuner_hint="use tuner='measure' for the host",
    threaded=True,
    estimate=estimate,
    peak_flops=peak_flops,
    build=build,
    tune=tune,
    report=report,
    describe_call=describe_call,
    run_seconds=run_seconds,
    sketch_model=sketch_model,
    calibration=calibration,
    micro_kernel_tolerance=host_model.TILE_TOLERANCE,
))

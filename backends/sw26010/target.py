"""The sw26010 target: one core group of the Sunway SW26010, simulated. Candidates are ranked by the thesis'
analytic model (`swauto.tuner.sw26010_model`) or timed on the timed simulator (`swauto.tuner.simulate`); a
kernel runs on the functional simulator with real data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from swauto import targets
from swauto.frontend.check import BoundOperator
from swauto.ir.nodes import Module
from swauto.machine import SUNWAY, SW26010, LocalMemoryMachine
from swauto.pipeline import Stages, before_double_buffering
from swauto.schedule.candidate import Candidate
from swauto.tuner import sw26010_model
from swauto.tuner.cost_model import Estimate
from swauto.tuner.sketch import SketchModel
from swauto.tuner.space import explore

from .codegen import emit_program
from .simulator import simulate
from .timing import time_module

NAME = "sw26010"


def machine() -> SW26010:
    """One core group: its CPEs' local memory and the mesh GEMM primitive's constraints."""
    return SUNWAY


def estimate(stages: Stages, threads: int, micro_kernel: tuple[int, int] | None = None,
             machine: SW26010 = SUNWAY) -> Estimate:
    """The thesis' model for one core group (`threads` does not apply, nor `micro_kernel`: the mesh GEMM
    has one register blocking; `machine`: the description it reads, e.g. with equation 4-2 alone for the
    primitive). The mesh GEMM synchronises its CPEs,
    so a transfer only overlaps compute when it is double buffered (thesis 3.2.1): single buffered, the
    terms are T_DMA and T_compute and they add up. Double buffered, the memory term is the model's total
    (the time until the last transfer completes, stalls and prologue included), which is never below
    T_compute: `seconds` is the model's figure."""
    module = before_double_buffering(stages)
    overlapped = any(name == "double_buffer" for name, _ in stages)
    model = sw26010_model.estimate(module, stages[-1][1], overlapped, machine)
    memory = model.seconds if overlapped else model.dma_seconds
    return Estimate(model.dma_bytes, model.flops, memory, model.compute_seconds, overlapped, model.transfers)


def sketch_model(threads: int) -> SketchModel:
    """The thesis' model on candidates' sketches (`threads` does not apply)."""
    return SketchModel(
        price=lambda sketch, double_buffered, peeled: sw26010_model.sketch_seconds(sketch, double_buffered, SUNWAY,
                                                                                  peeled),
        bound=lambda nest: sw26010_model.least_seconds(nest, SUNWAY),
        call_seconds=lambda call: sw26010_model.call_seconds(call, SUNWAY))


def peak_flops(threads: int) -> float:
    """One core group's peak, whatever `threads` says."""
    return SUNWAY.peak_flops


@dataclass(frozen=True)
class SimulatedProgram:
    """The CPE program of a candidate (`code`, for reading) and its final IR, which `run` executes on the
    functional simulator."""

    module: Module
    code: str

    def run(self, arrays: dict[str, np.ndarray], threads: int = 1) -> Mapping[str, Any]:
        """Simulate a call on `arrays` (outputs updated in place); the report gains the simulator's counters."""
        return {"simulated": simulate(self.module, arrays, SUNWAY).as_dict()}

    def prepack(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Nothing: the CPEs fetch every tile at every call."""
        return {}


def build(module: Module, candidate: Candidate) -> SimulatedProgram:
    return SimulatedProgram(module, emit_program(module, SUNWAY, str(candidate)))


def tune(op: BoundOperator, tuner: str, threads: int, machine: LocalMemoryMachine,
         max_candidates: int) -> tuple[Candidate, Stages]:
    """`simulate`: time every legal candidate on the timed simulator; `hybrid`: the model's best few."""
    # Imported here: swauto.tuner.simulate ranks by this target (its NAME), so a module-level import
    # would be a cycle.
    from swauto.tuner import simulate as simulated

    space = explore(op, machine, max_candidates=max_candidates)
    found = simulated.tune(space, simulated.HYBRID_TOP if tuner == "hybrid" else None).best.ranked
    return found.candidate, found.stages


def run_seconds(module: Module, candidate: Candidate, threads: int) -> float:
    """The timed simulator's seconds for one call on a core group (`threads` does not apply)."""
    return time_module(module, SUNWAY).seconds


def report(module: Module, flops: int) -> Mapping[str, Any]:
    """The timed simulator's figures (timing only, no data; issue 4)."""
    seconds = time_module(module, SUNWAY).seconds
    return {"simulated_s": seconds, "gflops": flops / seconds / 1e9,
            "peak_fraction": flops / seconds / SUNWAY.peak_flops}


def describe_call(report: Mapping[str, Any]) -> list[str]:
    """The functional simulator's counters of the last call, and its time against a core group's peak."""
    counters = report["simulated"]
    seconds = counters["seconds"]
    return [
        f"simulated  {counters['dma_get_bytes'] + counters['dma_put_bytes']} DMA bytes in "
        f"{counters['dma_transactions']} transactions, {counters['flops']} flops, "
        f"{counters['ldm_bytes_per_cpe']} B LDM per CPE",
        f"timed      {seconds * 1e3:.4g} ms  {report['flops'] / seconds / 1e9:.1f} GFLOPS  "
        f"{100 * report['flops'] / seconds / SUNWAY.peak_flops:.1f}% of a core group's peak "
        "(the timed simulator: one core group)",
    ]


TARGET = targets.register(targets.Target(
    name=NAME,
    description="one core group of the Sunway SW26010 (64 CPEs), simulated",
    machine=machine,
    tuners=("model", "simulate", "hybrid"),
    model_name="thesis model",
    runs_on="the simulated sw26010",
    tuner_hint=f"use tuner='model' for {NAME}",
    threaded=False,
    estimate=estimate,
    peak_flops=peak_flops,
    build=build,
    tune=tune,
    report=report,
    describe_call=describe_call,
    run_seconds=run_seconds,
    sketch_model=sketch_model,
))
